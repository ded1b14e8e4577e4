"""Context parallelism in the plan: each rank's activations are its own tokens', the ring
attention's key/value exchange buffers and traffic (hand-computed from torch 2.13's ring,
`fsdpspec/plan/ring.py`), and torchtitan's published CP table: the sequence length at
which `fsdpspec plan` says the job stops fitting, for each CP degree."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conftest import ROOT
from fsdpspec.catalog.presets import preset_config
from fsdpspec.cli.main import cli
from fsdpspec.job.geometry import geometry_from_config
from fsdpspec.job.job import resolve
from fsdpspec.plan import steptime
from fsdpspec.plan.compute import step_compute
from fsdpspec.plan.memory import device_memory
from fsdpspec.plan.steptime import LINK_EFFICIENCY, ring_serial_seconds, step_time
from fsdpspec.spec.v1 import JobSpec

EXAMPLE = ROOT / "examples" / "torchtitan-llama3.1-8b-cp.yaml"
GEOMETRY = geometry_from_config(preset_config("tiny-llama"))  # q 64, kv 32, 4 heads
H100 = "H100-80GB"


def _job(*, cp: int, seq: int, ac: str = "none"):
    spec = JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "cp"},
        "resources": {"nodes": 1, "gpus_per_node": 8, "accelerator": H100},
        "model": {"preset": "tiny-llama", "attention": "sdpa"},
        "fsdp": {"mixed_precision": "bf16", "activation_checkpointing": ac},
        "parallelism": {"context_parallel": cp},
        "data": {"seq_len": seq, "micro_batch_size": 1, "global_batch_size": 8 // cp}})
    return resolve(spec, Path("."), geometry=GEOMETRY)


def _points(job) -> dict[str, dict[str, int]]:
    return {p.name: p.terms for p in device_memory(job).points}


def test_each_rank_holds_the_activations_of_its_share_of_the_sequence() -> None:
    split, whole = _points(_job(cp=4, seq=256)), _points(_job(cp=1, seq=64))
    assert split.keys() == whole.keys()
    for name, terms in whole.items():
        for term in ("activations", "logits_and_loss", "backward_temporaries"):
            assert split[name][term] == terms[term], (name, term)
    # FSDP shards over the 8 data-parallel × context-parallel ranks either way.
    assert _job(cp=4, seq=256).layout.shard_size == 8


def test_the_ring_buffers_are_torchs_gathered_kv_and_fp32_gradients() -> None:
    # cp 4, 64 tokens a rank, bf16: the k/v block is 2·2·64·32 bytes; all 4 gathered
    # beside the local one, fp32 gradients of q, k, v, and a k/v gradient block sent
    # and one received.
    kv_block = 2 * 2 * 64 * 32
    expected = 5 * kv_block + 4 * 64 * (64 + 2 * 32) + 2 * 4 * 64 * 2 * 32
    layer = _points(_job(cp=4, seq=256))["backward: layer 1"]
    assert layer["ring_buffers"] == expected == 106_496
    assert _points(_job(cp=1, seq=64))["backward: layer 1"]["ring_buffers"] == 0


@pytest.mark.parametrize(("ac", "recomputed"), [("none", 0), ("full", 2)])
def test_the_rings_traffic_is_exposed_step_time(ac: str, recomputed: int) -> None:
    job = _job(cp=4, seq=256, ac=ac)
    device = job.spec.device()
    c = step_compute(job, GEOMETRY.active_params, device, "bfloat16")
    # Per layer: the other 3 ranks' k/v blocks in forward, again in backward with their
    # fp32 gradients; a recomputing layer gathers its forward's again.
    forward = 3 * 2 * 2 * 64 * 32
    backward = forward + 3 * 4 * 2 * 64 * 32
    assert c.ring_bytes == 2 * (forward + backward) + recomputed * forward
    assert c.ring_seconds == pytest.approx(c.ring_bytes / (device.intra_node_gbps * 1e9))
    without = step_time(job, dataclasses.replace(c, ring_seconds=0.0), device, "bfloat16")
    with_ring = step_time(job, c, device, "bfloat16")
    assert with_ring.exposed_communication_seconds - without.exposed_communication_seconds \
        == pytest.approx(c.ring_seconds / LINK_EFFICIENCY[True], rel=1e-6)


@pytest.mark.parametrize(("ac", "recomputed"), [("none", 0), ("full", 2)])
def test_the_rings_merges_and_accumulations_are_serial_memory_traffic(
        ac: str, recomputed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # cp 4, 64 tokens a rank, q 64, kv 32, 2 layers: at each of the 3 steps past the first,
    # forward merges the block's output in fp32 (38 bytes a query element), backward
    # accumulates dq (10) and dk, dv with their concatenations (50 a key/value element);
    # a recomputing layer merges its forward again.
    job = _job(cp=4, seq=256, ac=ac)
    device = job.spec.device()
    forward, backward = 3 * 38 * 64 * 64, 3 * (10 * 64 * 64 + 50 * 64 * 32)
    expected = ((2 + recomputed) * forward + 2 * backward) / (device.hbm_gbps * 1e9)
    assert ring_serial_seconds(job, device) == pytest.approx(expected, rel=1e-12)
    assert ring_serial_seconds(_job(cp=1, seq=64, ac=ac), device) == 0.0
    # On the compute stream, after the ring's exchange: the step is that much longer.
    c = step_compute(job, GEOMETRY.active_params, device, "bfloat16")
    with_merges = step_time(job, c, device, "bfloat16").seconds
    monkeypatch.setattr(steptime, "ring_serial_seconds", lambda job, device: 0.0)
    assert with_merges - step_time(job, c, device, "bfloat16").seconds == pytest.approx(
        expected, rel=1e-6)


def _plan(*sets: str) -> dict[str, Any]:
    args = ["plan", str(EXAMPLE), "--format", "json"]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)


# pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 2: FSDP + CP,
# Llama 3.1 8B, 8 H100 96 GB, local batch 1, full AC: the longest sequence each CP
# degree reached (docs/memory.md).
TORCHTITAN_CP = [(1, 32768), (2, 65536), (4, 131072), (8, 262144)]


@pytest.mark.parametrize(("cp", "reached"), TORCHTITAN_CP)
def test_plan_stops_fitting_past_the_sequence_torchtitan_reached(cp: int, reached: int) -> None:
    layout = (f"parallelism.context_parallel={cp}", f"data.global_batch_size={8 // cp}")
    fits = _plan(*layout, f"data.seq_len={reached}")
    assert fits["fits_device"] and fits["context_parallel"] == cp, fits["memory"]
    assert not _plan(*layout, f"data.seq_len={2 * reached}")["fits_device"]
