"""A Mixture of Experts with fewer experts than ranks (issue 44): tiny Mixtral with 2
experts trains on 4 gloo processes with its stacked experts sharded on dim 1 (the FSDP
degree 4 exceeds the 2 experts), on 2 processes on dim 0 (the degree does not). Both see
the same global batch and seed, so their losses agree; each rank's saved shard of the
experts is the size the plan gives it; and a DCP checkpoint written under either
placement resumes under the other (the world size changes, and with it the placement).
Three launches (2, 4, then 2 processes): the jobs of one launch share its mesh."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from engine_jobs import BASE, losses, merged, torchrun_jobs  # noqa: E402

from fsdpspec.catalog.presets import preset_config  # noqa: E402
from fsdpspec.job.experts import expert_shard_dim  # noqa: E402
from fsdpspec.job.job import resolve  # noqa: E402
from fsdpspec.plan.unit_shards import sharding  # noqa: E402
from fsdpspec.runfiles.resolved import write_resolved_spec  # noqa: E402
from fsdpspec.spec.v1 import JobSpec  # noqa: E402

EXPERTS = 2
STEPS = 4
MIDDLE = "step-00000002"
CONFIG = "tiny-mixtral-2"


def _job(config_dir: Path, ranks: int, resume: Path | None = None) -> dict[str, Any]:
    return merged(BASE, {
        "resources": {"gpus_per_node": ranks},
        "model": {"preset": None, "hf_config": str(config_dir)},
        "train": {"max_steps": STEPS},
        "checkpoint": {"interval_steps": 2, "keep_last": 0, "final": {"enabled": False},
                       "resume": str(resume) if resume else "auto"},
    })


def _launch(root: Path, nproc: int, jobs: dict[str, dict[str, Any]]) -> None:
    specs = [write_resolved_spec(JobSpec.model_validate(job), root / name)
             for name, job in jobs.items()]
    for name, done in zip(jobs, torchrun_jobs(specs, nproc=nproc), strict=True):
        assert done.returncode == 0, (name, (done.stdout + done.stderr)[-3000:])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """shard0 (2 ranks), shard1 (4 ranks), shard0-on-4 (shard0's step 2 resumed on 4
    ranks) and shard1-on-2 (shard1's step 2 resumed on 2)."""
    root = tmp_path_factory.mktemp("placement")
    config = root / CONFIG
    config.mkdir()
    (config / "config.json").write_text(json.dumps(
        preset_config("tiny-mixtral") | {"num_local_experts": EXPERTS}))
    _launch(root, 2, {"shard0": _job(config, 2)})
    _launch(root, 4, {"shard1": _job(config, 4),
                      "shard0-on-4": _job(config, 4, root / "shard0" / "checkpoints" / MIDDLE)})
    _launch(root, 2, {"shard1-on-2": _job(config, 2, root / "shard1" / "checkpoints" / MIDDLE)})
    return root


@pytest.mark.slow
def test_experts_sharded_on_dim_1_train_as_on_dim_0(runs: Path) -> None:
    shard0, shard1 = losses(runs / "shard0"), losses(runs / "shard1")
    assert sorted(shard0) == list(range(1, STEPS + 1))
    assert shard1 == pytest.approx(shard0, abs=1e-5)


@pytest.mark.slow
def test_each_ranks_expert_shard_is_the_planned_size(runs: Path) -> None:
    """The checkpoint's chunks are each rank's own shard as it held it."""
    from torch.distributed.checkpoint import FileSystemReader

    for name, ranks in (("shard0", 2), ("shard1", 4)):
        job = resolve(JobSpec.model_validate(_job(runs / CONFIG, ranks)), runs)
        sh = sharding(job)
        layer = sh.units[0]
        # The plan's shards of the layer: its dense tensors', then its experts'.
        planned = dict(zip((shape for shape, _ in layer.experts),
                           (k for k, _ in sh.tensor_shards(layer)[len(layer.shapes):]),
                           strict=True))
        saved = FileSystemReader(str(runs / name / "checkpoints" / MIDDLE)).read_metadata()
        for key in ("gate_up_proj", "down_proj"):
            held = saved.state_dict_metadata[f"model.model.layers.0.mlp.experts.{key}"]
            shape = tuple(held.size)
            assert expert_shard_dim(shape, ranks) == (1 if ranks > EXPERTS else 0)
            assert [math.prod(c.sizes) for c in held.chunks] == [planned[shape]] * ranks


@pytest.mark.slow
@pytest.mark.parametrize(("resumed", "straight"), [("shard0-on-4", "shard0"),
                                                    ("shard1-on-2", "shard1")])
def test_a_checkpoint_resumes_under_the_other_placement(runs: Path, resumed: str,
                                                        straight: str) -> None:
    after = losses(runs / resumed)
    assert sorted(after) == [3, 4]
    assert after == pytest.approx({s: losses(runs / straight)[s] for s in after}, abs=1e-5)
