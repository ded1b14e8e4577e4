"""A sharded checkpoint loads on a rank that holds none of a parameter.

Under FSDP1 with 3 processes, the rank whose shard holds none of an MoE layer's experts
has a ShardedTensor without local shards for them, which torch's DefaultLoadPlanner
drops from its state. It then took the checkpoint for one from torch < 2.4, re-flattened
the state the old way and failed with "Missing key in checkpoint state_dict: data"
(soundness --wide: tiny-mixtral and tiny-olmoe, FSDP1, 3 processes, SHARDED_STATE_DICT,
the resume). Here the same state on 2 gloo processes, without a model: the tensor's one
shard is rank 0's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

WORLD = 2


def _sharded_on_rank0(value: float):
    from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor, ShardMetadata
    from torch.distributed._shard.sharded_tensor.metadata import (
        ShardedTensorMetadata,
        TensorProperties,
    )

    shard = ShardMetadata(shard_offsets=[0], shard_sizes=[3], placement="rank:0/cpu")
    meta = ShardedTensorMetadata(shards_metadata=[shard], size=torch.Size([3]),
                                 tensor_properties=TensorProperties(dtype=torch.float32))
    local = [Shard(torch.full((3,), value), shard)] if torch.distributed.get_rank() == 0 else []
    return ShardedTensor._init_from_local_shards_and_global_metadata(local, meta)


def _state(value: float, position: int) -> dict:
    return {"model": {"attn": torch.full((2,), value), "experts": _sharded_on_rank0(value)},
            "data": {"position": position}}


def _rank(rank: int, root: str) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from fsdpspec_runners.engine.checkpoint import _LoadPlanner

    dist.init_process_group("gloo", init_method=f"file://{root}/store", rank=rank,
                            world_size=WORLD)
    try:
        dcp.save(_state(1.0, 6), checkpoint_id=f"{root}/ckpt")
        try:
            dcp.load(_state(0.0, 0), checkpoint_id=f"{root}/ckpt")
            default = "loaded"
        except CheckpointException as exc:  # every rank hears of rank 1's failure
            missing = "Missing key in checkpoint state_dict: data" in str(exc)
            default = "fails" if missing else str(exc)
        state = _state(0.0, 0)
        dcp.load(state, checkpoint_id=f"{root}/ckpt", planner=_LoadPlanner())
        Path(root, f"rank{rank}.json").write_text(json.dumps(
            [default, state["data"]["position"], state["model"]["attn"].tolist()]))
    finally:
        dist.destroy_process_group()


def test_a_rank_without_a_shard_of_a_parameter_resumes(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # fork: the ranks start with torch imported (a spawn re-imports it in each).
    mp.start_processes(_rank, args=(str(tmp_path),), nprocs=WORLD, start_method="fork")
    outcome = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    # torch's own planner fails (if this starts to read "loaded", torch fixed its guess);
    # the engine's loads on every rank.
    assert outcome == [["fails", 6, [1.0, 1.0]]] * WORLD
