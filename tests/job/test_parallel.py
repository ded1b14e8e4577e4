"""`ParallelDims`: `fsdp.sharding_strategy` and `fsdp.shard_group_size` as named degrees,
the one `validate` that FS104 and the engine's mesh call, and the data-parallel size and
rank that data, evaluation and the batch use instead of the world size."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from fsdpspec.job.layout import layout
from fsdpspec.job.parallel import ParallelDims, ParallelDimsError, parallel_dims
from fsdpspec.spec.v1 import JobSpec


def _spec(nodes: int = 2, gpus: int = 8, **fsdp) -> JobSpec:
    return JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "dims"},
        "resources": {"nodes": nodes, "gpus_per_node": gpus},
        "launch": {"rdzv_endpoint": "node-0:29500"}, "model": {"preset": "tiny-llama"},
        "fsdp": fsdp, "data": {"seq_len": 32, "micro_batch_size": 2,
                               "global_batch_size": 64}})


@pytest.mark.parametrize(("fsdp", "replicate", "shard", "names"), [
    ({"sharding_strategy": "FULL_SHARD"}, 1, 16, ("dp_shard",)),
    ({"sharding_strategy": "SHARD_GRAD_OP"}, 1, 16, ("dp_shard",)),
    ({"sharding_strategy": "NO_SHARD"}, 16, 1, ("dp_replicate", "dp_shard")),
    ({"sharding_strategy": "HYBRID_SHARD"}, 2, 8, ("dp_replicate", "dp_shard")),
    ({"sharding_strategy": "HYBRID_SHARD_ZERO2", "shard_group_size": 4}, 4, 4,
     ("dp_replicate", "dp_shard")),
])
def test_each_strategy_is_a_pair_of_data_parallel_degrees(
        fsdp: dict, replicate: int, shard: int, names: tuple[str, ...]) -> None:
    dims = layout(_spec(**fsdp)).dims
    dims.validate()
    assert (dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp, dims.pp, dims.ep) == (
        replicate, shard, 1, 1, 1, 1)
    assert dims.mesh_names == dims.fsdp_mesh_names == names
    assert dims.dp_size == 16  # every rank reads its own micro-batches
    assert (dims.dp_replicate_enabled, dims.dp_shard_enabled) == (replicate > 1, shard > 1)
    assert not (dims.cp_enabled or dims.tp_enabled or dims.pp_enabled or dims.ep_enabled)


def test_fsdp1_runs_hybrid_groups_of_one_rank_as_no_shard() -> None:
    dims = layout(_spec(nodes=1, gpus=2, version=1, sharding_strategy="HYBRID_SHARD",
                        shard_group_size=1)).dims
    assert (dims.written_strategy, dims.strategy) == ("HYBRID_SHARD", "NO_SHARD")
    assert dims.mesh_shape == (2, 1)
    fsdp2 = layout(_spec(nodes=1, gpus=2, sharding_strategy="HYBRID_SHARD",
                         shard_group_size=1)).dims
    assert fsdp2.strategy == "HYBRID_SHARD"


@pytest.mark.parametrize(("group", "world"), [(3, 4), (16, 8)])
def test_validate_refuses_a_shard_group_that_does_not_divide_the_world(
        group: int, world: int) -> None:
    dims = parallel_dims(world_size=world, strategy="HYBRID_SHARD", shard_group_size=group,
                         gpus_per_node=world, fsdp_version=2)
    with pytest.raises(ParallelDimsError, match=f"shard group of {group} ranks does not "
                                                f"divide the world size {world}") as caught:
        dims.validate()
    assert caught.value.field == "/fsdp/shard_group_size"


def test_validate_refuses_degrees_that_do_not_multiply_to_the_world() -> None:
    dims = replace(layout(_spec()).dims, tp=2)
    with pytest.raises(ParallelDimsError, match="= 32 ranks, not the world size 16"):
        dims.validate()


def test_the_data_parallel_rank_skips_the_ranks_of_one_cp_and_tp_group() -> None:
    flat = layout(_spec()).dims
    assert [flat.dp_rank(r) for r in range(16)] == list(range(16))
    # The degrees a later dimension adds: 4 data-parallel ranks of 2 cp × 2 tp each.
    dims = ParallelDims(world_size=16, dp_replicate=1, dp_shard=4, written_strategy="FULL_SHARD",
                        strategy="FULL_SHARD", requested_shard=4, cp=2, tp=2)
    dims.validate()
    assert [dims.dp_rank(r) for r in range(16)] == [r // 4 for r in range(16)]
    assert dims.mesh_names == ("dp_shard", "cp", "tp") and dims.mesh_shape == (4, 2, 2)


def test_the_batch_divides_over_data_parallel_ranks() -> None:
    job_layout = layout(_spec())
    batch = job_layout.batch
    assert (batch.micro, batch.seq, batch.global_size, batch.dp_size) == (2, 32, 64, 16)
    assert (batch.per_pass, batch.accumulation, batch.divides, batch.tokens) == (32, 2, True, 64)
    assert layout(_spec(), world_size=3).batch.divides is False  # 64 over 3 × 2


def test_fs104_is_validate_s_message_through_the_cli(cli, tmp_path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "dims"},
        "resources": {"nodes": 1, "gpus_per_node": 4, "accelerator": "cpu"},
        "model": {"preset": "tiny-llama"},
        "fsdp": {"sharding_strategy": "HYBRID_SHARD", "shard_group_size": 3}}))
    result = cli("validate", str(spec))
    assert result.returncode == 1
    assert "FS104" in result.stdout and (
        "shard group of 3 ranks does not divide the world size 4" in result.stdout)


@pytest.mark.parametrize(("fsdp", "names", "fsdp_names"), [
    ({"sharding_strategy": "FULL_SHARD"}, ("dp_shard", "cp"), ("dp_shard_cp",)),
    ({"sharding_strategy": "HYBRID_SHARD", "shard_group_size": 2},
     ("dp_replicate", "dp_shard", "cp"), ("dp_replicate", "dp_shard_cp")),
])
def test_fsdp_shards_over_the_data_parallel_and_context_parallel_ranks(
        fsdp: dict, names: tuple[str, ...], fsdp_names: tuple[str, ...]) -> None:
    data = _spec(nodes=1, **fsdp).model_dump()
    lay = layout(JobSpec.model_validate(data | {"parallelism": {"context_parallel": 2}}))
    dims = lay.dims
    dims.validate()
    assert (dims.mesh_names, dims.fsdp_mesh_names) == (names, fsdp_names)
    assert dims.dp_size == 4 and dims.fsdp_shard == lay.shard_size == 2 * dims.dp_shard
    # Each rank holds half of every sequence; the two ranks of a cp group read the same.
    assert (lay.batch.local_seq, lay.batch.tokens) == (16, 32)
    assert [dims.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize(("fsdp", "parallelism", "efsdp", "sparse", "shape"), [
    # 16 ranks of FULL_SHARD: the experts split over 8, each sharded over 2.
    ({"sharding_strategy": "FULL_SHARD"}, {"expert_parallel": 8}, 2, ("efsdp", "ep"), (2, 8)),
    # efsdp stays on the mesh at degree 1 (FSDP still casts the experts' dtypes).
    ({"sharding_strategy": "FULL_SHARD"}, {"expert_parallel": 16}, 1, ("efsdp", "ep"),
     (1, 16)),
    # HSDP: groups of 8 replicated twice; EP regroups each shard group.
    ({"sharding_strategy": "HYBRID_SHARD"}, {"expert_parallel": 4}, 2,
     ("dp_replicate", "efsdp", "ep"), (2, 2, 4)),
    # EP takes the tensor-parallel ranks whole: dp_shard 8 × tp 2 = 16 = efsdp 4 × ep 4.
    ({"sharding_strategy": "FULL_SHARD"}, {"expert_parallel": 4, "tensor_parallel": 2}, 4,
     ("efsdp", "ep"), (4, 4)),
])
def test_expert_parallelism_regroups_the_sharding_ranks_into_efsdp_and_ep(
        fsdp: dict, parallelism: dict, efsdp: int, sparse: tuple[str, ...],
        shape: tuple[int, ...]) -> None:
    data = _spec(**fsdp).model_dump()
    dims = layout(JobSpec.model_validate(data | {"parallelism": parallelism})).dims
    dims.validate()
    assert dims.ep == parallelism["expert_parallel"] and dims.ep_enabled
    assert (dims.efsdp, dims.sparse_mesh_names, dims.sparse_mesh_shape) == (efsdp, sparse, shape)
    assert dims.expert_fsdp_mesh_names == sparse[:-1]
    # The world and the dense mesh are those of the same job without EP.
    dense = layout(JobSpec.model_validate(
        data | {"parallelism": parallelism | {"expert_parallel": 1}})).dims
    assert (dims.mesh_names, dims.mesh_shape, dims.dp_size) == (
        dense.mesh_names, dense.mesh_shape, dense.dp_size)
    assert dense.sparse_mesh_names == dense.expert_fsdp_mesh_names == ()
    recorded = dims.as_json()
    assert (recorded["ep"], recorded["efsdp"], recorded["sparse_mesh_names"]) == (
        dims.ep, efsdp, list(sparse))


@pytest.mark.parametrize(("parallelism", "message"), [
    ({"expert_parallel": 3}, "expert_parallel 3 does not divide the 16 ranks that shard the "
                             "experts (FSDP shard group 16 × context_parallel 1 × "
                             "tensor_parallel 1)"),
    ({"expert_parallel": 32}, "expert_parallel 32 does not divide the 16 ranks"),
    ({"expert_parallel": 2, "tensor_parallel": 4},
     "expert_parallel 2 is not a multiple of context_parallel 1 × tensor_parallel 4"),
])
def test_validate_refuses_an_expert_parallel_degree_the_ranks_cannot_hold(
        parallelism: dict, message: str) -> None:
    data = _spec().model_dump() | {"parallelism": parallelism}
    dims = layout(JobSpec.model_validate(data)).dims
    with pytest.raises(ParallelDimsError, match=re.escape(message)) as caught:
        dims.validate()
    assert caught.value.field == "/parallelism/expert_parallel"
