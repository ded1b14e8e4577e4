"""The grace a scheduler gives a stopped job: twice the planned write of each node's
share of one checkpoint at 1 GiB/s, never under 60 s."""

from __future__ import annotations

import math
from pathlib import Path

from fsdpspec.catalog.presets import preset_config
from fsdpspec.job.geometry import geometry_from_config
from fsdpspec.job.job import Job, resolve
from fsdpspec.plan.checkpoint import checkpoint_bytes, stop_grace_seconds
from fsdpspec.spec.v1 import JobSpec

BASE = Path(".")  # presets and inline geometries: no input paths


def job(preset: str | None, nodes: int = 1, optimizer: str = "adamw") -> Job:
    model = {"preset": preset} if preset else {"factory": "models:tiny"}
    return resolve(JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "g"},
        "resources": {"nodes": nodes, "gpus_per_node": 8, "accelerator": "H100-80GB"},
        "model": model, "optimizer": {"name": optimizer},
        "launch": {"rdzv_endpoint": "head:29400"}}), BASE)


def test_adamw_checkpoint_is_params_and_two_states_in_fp32() -> None:
    config = preset_config("llama3-70b")
    params = geometry_from_config(config).total_params
    assert checkpoint_bytes(job("llama3-70b")) == params * 4 * 3
    assert checkpoint_bytes(job("llama3-70b", optimizer="sgd")) == params * 4 * 2


def test_grace_is_twice_each_nodes_write() -> None:
    config = preset_config("llama3-70b")
    total = geometry_from_config(config).total_params * 12
    assert stop_grace_seconds(job("llama3-70b", nodes=8)) == math.ceil(
        2 * total / 8 / 2**30)
    assert stop_grace_seconds(job("llama3-70b", nodes=2)) == math.ceil(
        2 * total / 2 / 2**30)


def test_small_models_and_unknown_geometry_get_the_floor() -> None:
    assert stop_grace_seconds(job("tiny-llama")) == 60
    assert stop_grace_seconds(job(None)) == 60  # a factory model: no geometry
