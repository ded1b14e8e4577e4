"""The job resolved-spec.json records (`fsdpspec.job.record`), read back as every rank of
the engine reads it: the same job the launcher resolved, for a dense model, a Mixture of
Experts, a LoRA, a factory model and an introspected geometry; checked once against the spec
it came from."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fsdpspec.job.job import Job, resolve
from fsdpspec.job.record import job_from_record, job_record
from fsdpspec.job.units import geometry_tree
from fsdpspec.jsonfile import JsonFileError
from fsdpspec.runfiles.resolved import (
    read_resolved_job,
    write_resolved_spec,
)
from fsdpspec.spec.v1 import JobSpec

ROOT = Path(__file__).resolve().parents[2]
BASE = {"apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "rec"},
        "resources": {"gpus_per_node": 2, "accelerator": "cpu"},
        "data": {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": 4}}
FACTORY = {"factory": "tiny_models:make", "geometry": {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 1, "vocab_size": 320}}


def _written_and_read(spec: JobSpec, tmp_path: Path) -> tuple[Job, Job]:
    resolved = write_resolved_spec(spec, tmp_path / "run")
    job, run_dir = read_resolved_job(resolved)
    assert run_dir == (tmp_path / "run").resolve()
    return resolve(spec, Path("/")), job


def _geometry_fields(job: Job) -> dict:
    g = job.geometry
    return {} if g is None else {**dataclasses.asdict(g), "built_tree": None}


@pytest.mark.parametrize("section", [
    {"model": {"preset": "tiny-llama"}, "fsdp": {"activation_checkpointing": "selective"}},
    {"model": {"preset": "tiny-mixtral"}, "resources": {"gpus_per_node": 4},
     "fsdp": {"sharding_strategy": "HYBRID_SHARD", "shard_group_size": 2}},
    {"model": {"preset": "tiny-qwen2"}, "peft": {"method": "lora", "r": 4},
     "fsdp": {"version": 1, "sharding_strategy": "HYBRID_SHARD", "shard_group_size": 1}},
    {"model": FACTORY, "fsdp": {"sharding_strategy": "NO_SHARD"}},
], ids=["dense", "moe-hybrid", "lora-fsdp1", "factory-no-shard"])
def test_the_recorded_job_is_the_resolved_one(section: dict, tmp_path: Path) -> None:
    spec = JobSpec.model_validate({**BASE, **section, "resources": {
        **BASE["resources"], **section.get("resources", {})},
        "checkpoint": {"dir": str(tmp_path / "runs")}})
    resolved, recorded = _written_and_read(spec, tmp_path)
    assert recorded.spec == spec
    assert recorded.layout == resolved.layout and recorded.batch == resolved.batch
    assert recorded.units == resolved.units and recorded.adapters == resolved.adapters
    assert recorded.config == resolved.config
    assert _geometry_fields(recorded) == _geometry_fields(resolved)
    assert recorded.flops_per_token() == resolved.flops_per_token()


def test_an_introspected_geometry_is_recorded_without_its_module_tree() -> None:
    job = resolve(JobSpec.model_validate({**BASE, "model": {"preset": "tiny-llama"}}),
                  Path("/"))
    g = job.geometry
    built = dataclasses.replace(  # what introspection adds to a geometry
        g, built_layer=(("mlp.up_proj.weight", (128, 64)),), built_root=(("norm.weight", (64,)),),
        built_params=1000, built_tree=geometry_tree(g), built_layer_classes=("Block",))
    introspected = dataclasses.replace(job, geometry=built)
    record = json.loads(json.dumps(job_record(introspected)))
    recorded = job_from_record(job.spec, record, Path("/"), Path("resolved-spec.json"))
    assert recorded.geometry == dataclasses.replace(built, built_tree=None)
    assert recorded.geometry.introspected and recorded.units == job.units


def test_a_record_of_another_spec_or_version_is_refused(tmp_path: Path) -> None:
    spec = JobSpec.model_validate({**BASE, "model": {"preset": "tiny-llama"},
                                   "checkpoint": {"dir": str(tmp_path / "runs")}})
    path = write_resolved_spec(spec, tmp_path / "run")
    document = json.loads(path.read_text())
    document["spec"]["data"]["micro_batch_size"] = 2  # edited by hand: the job is stale
    path.write_text(json.dumps(document))
    with pytest.raises(JsonFileError, match="the recorded job is not its spec's"):
        read_resolved_job(path)
    document = json.loads(write_resolved_spec(spec, tmp_path / "again").read_text())
    document["fsdpspec_version"] = "0.0.1"
    path.write_text(json.dumps(document))
    with pytest.raises(JsonFileError, match="written by fsdpspec 0.0.1"):
        read_resolved_job(path)
