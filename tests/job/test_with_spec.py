"""`Job.with_spec`: another spec for the same model, with the units it wraps (chosen
again only when the wrap changes: `fsdpspec tune` plans hundreds of specs of one model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdpspec.job.job import job_units, resolve
from fsdpspec.spec.v1 import JobSpec


def _spec(**fsdp) -> JobSpec:
    return JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "job"},
        "resources": {"gpus_per_node": 2}, "model": {"preset": "tiny-llama"},
        "fsdp": fsdp, "data": {"seq_len": 32, "micro_batch_size": 1,
                               "global_batch_size": 4}})


def test_a_spec_that_wraps_alike_keeps_the_units() -> None:
    job = resolve(_spec(), Path("."))
    other = _spec(sharding_strategy="SHARD_GRAD_OP", cpu_offload=True)
    changed = job.with_spec(other)
    assert changed.units is job.units
    assert changed.units == job_units(other, job.geometry)
    assert changed.layout.strategy == "SHARD_GRAD_OP"


@pytest.mark.parametrize("fsdp", [
    {"auto_wrap_policy": "size", "min_num_params": 1000},
    {"auto_wrap_policy": "none"},
    {"version": 1, "activation_checkpointing": "selective"},
])
def test_a_spec_that_wraps_otherwise_chooses_its_units(fsdp: dict) -> None:
    job = resolve(_spec(), Path("."))
    other = _spec(**fsdp)
    changed = job.with_spec(other)
    assert changed.units == job_units(other, job.geometry) == resolve(other, Path(".")).units
    assert changed.units != job.units
