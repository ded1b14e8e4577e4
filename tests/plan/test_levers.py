"""The memory levers' terms (hand-counted on the tiny Llama of test_plan.py), and
`fsdpspec plan` on torchtitan's Llama 3 8B job as a user runs it."""

from __future__ import annotations

import json
import math

import pytest
from test_plan import BASE, GEOMETRY, LAYER, make_spec, points
from test_plan import ROOT as ROOT_PARAMS

from conftest import ROOT, run_cli
from fsdpspec.job.job import resolve
from fsdpspec.plan.memory import device_memory

GIB = 1 << 30
TORCHTITAN = ROOT / "examples" / "torchtitan-llama3-8b.yaml"
# torchtitan's docs/performance.md, table 1: FSDP, Llama 3.1 8B, 8 H100, local batch 2.
TORCHTITAN_MAX_RESERVED_GIB = 82.4
# tiny-llama: hidden 64, MLP 128, q 64, kv 32, 4 heads, vocab 320; seq 8, micro-batch 1.
H, MLP, Q, KV, HEADS, V, T = 64, 128, 64, 32, 4, 320, 8


def test_op_level_checkpointing_keeps_every_other_matmul_and_attention() -> None:
    """q, v, gate and down (the 1st, 3rd, 5th, 7th mm), the input, and SDPA's output and
    log-sum-exp, in bf16; the layer in backward recomputes the rest."""
    kept = 2 * T * (H + Q + KV + MLP + H) + 2 * T * Q + 4 * HEADS * T
    op = points(fsdp={"mixed_precision": "bf16", "activation_checkpointing": "op"})
    none = points()
    full_layer = none["backward: layer 1"]["activations"] - none["backward: layer 0"][
        "activations"]
    assert op["backward: layer 0"]["activations"] == kept + full_layer
    assert op["backward: layer 1"]["activations"] == 2 * kept + full_layer


def test_chunked_loss_holds_one_chunk_of_logits() -> None:
    """4 chunks of 2 tokens: forward the chunk's bf16 logits, fp32 upcast and
    log-softmax; backward 12 bytes per logit, the recomputed logits and their gradient,
    and the hidden-state gradients of the whole micro-batch."""
    chunked = points(train={"loss_chunks": 4})
    tokens = math.ceil(T / 4)
    assert chunked["forward: loss"]["logits_and_loss"] == (2 + 4 + 4) * tokens * V
    # tiny-llama's head is untied: the recomputed logits and their gradient as well.
    assert chunked["backward: loss"]["logits_and_loss"] == (12 + 4) * tokens * V + 2 * T * H
    assert "logits_and_loss" not in chunked["forward: lm_head"]
    plain = points()
    assert plain["forward: loss"]["logits_and_loss"] == (2 + 4 + 4) * T * V


def test_optimizer_state_precision() -> None:
    """bf16 moments are half of fp32's; torchao's 8-bit ones a byte per element plus an
    fp32 scale per 256 for tensors of 4096 elements or more (fp32 below)."""
    states = {d: points(optimizer={"state_dtype": d})["optimizer step"]["optimizer_states"]
              for d in ("float32", "bfloat16")}
    assert states["bfloat16"] * 2 == states["float32"]
    int8 = device_memory(resolve(make_spec(optimizer={"state_dtype": "int8"}), BASE,
                                  geometry=GEOMETRY))
    # Over 4 ranks only the embedding's and lm_head's shards (80 × 64) reach 4096
    # elements: 5120 bytes + 20 scales each; the other 28752 - 10240 elements stay fp32.
    shard = (2 * LAYER + ROOT_PARAMS) // 4
    assert int8.points[-1].terms["optimizer_states"] == 2 * (
        2 * (5120 + 4 * 20) + 4 * (shard - 2 * 5120))


def test_activation_offload_moves_saved_activations_to_the_host() -> None:
    on = points(fsdp={"mixed_precision": "bf16", "activation_offload": True})
    assert "activations" not in on["backward: loss"] or on["backward: loss"][
        "activations"] < points()["backward: loss"]["activations"]
    plan = json.loads(run_cli("plan", str(TORCHTITAN), "--set", "fsdp.activation_offload=true",
                              "--format", "json").stdout)
    assert plan["memory"]["host"]["terms"]["offloaded_activations"] > 0
    assert plan["compute"]["offload_seconds"] > 0


def test_torchtitan_llama3_8b_plan_is_within_ten_percent_of_its_published_memory() -> None:
    result = run_cli("plan", str(TORCHTITAN), "--format", "json")
    assert result.returncode == 0, result.stderr
    reserved = json.loads(result.stdout)["memory"]["device"]["peak_reserved_bytes"] / GIB
    assert abs(reserved / TORCHTITAN_MAX_RESERVED_GIB - 1) <= 0.10, reserved


def test_levers_fit_the_every_other_layer_job_on_eight_gpus_with_set_lines_that_validate(
) -> None:
    """Every-other-layer checkpointing needs 32 of the GPUs; plan names the levers that fit
    it on its 8, as --set lines; validate accepts them and the plan with them fits."""
    today = ("--set", "fsdp.activation_checkpointing=selective")
    plan = json.loads(run_cli("plan", str(TORCHTITAN), *today, "--format", "json").stdout)
    assert plan["min_gpus"] == 32 and plan["world_size"] == 8
    overrides = plan["fitting_levers"]["overrides"]
    sets = [arg for o in overrides for arg in ("--set", o)]
    text = run_cli("plan", str(TORCHTITAN), *today).stdout
    assert "fits on 8 H100-96GB with" in text and all(f"--set {o}" in text for o in overrides)
    assert run_cli("validate", str(TORCHTITAN), *today, *sets).returncode == 0
    after = run_cli("plan", str(TORCHTITAN), *today, *sets, "--format", "json")
    assert after.returncode == 0 and json.loads(after.stdout)["fits"] is True


def test_trace_refuses_what_fake_tensors_cannot_show() -> None:
    """torchao's 8-bit step reads tensor values: one line, no traceback."""
    pytest.importorskip("torch")
    result = run_cli("plan", str(TORCHTITAN), "--trace", "--set", "optimizer.state_dtype=int8",
                     timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--trace cannot step torchao's 8-bit AdamW on fake tensors" in result.stderr
