"""Tensor parallelism in the plan: what one rank of a group holds (hand-counted terms),
its collectives in the step time, the lever `plan` offers, and torchtitan's published
2-D run and a 70B `tune` through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT, run_cli
from fsdpspec.catalog.accelerators import CATALOG
from fsdpspec.job.job import Job, resolve
from fsdpspec.plan import tensor_parallel as tp
from fsdpspec.plan.memory import device_memory, layer_bytes
from fsdpspec.plan.planner import plan_job
from fsdpspec.spec.v1 import JobSpec

EXAMPLE = ROOT / "examples" / "llama3.1-405b-tp.yaml"
SEVENTY = ROOT / "examples" / "llama3-70b-multinode.yaml"
# Llama 3 8B: H 4096, MLP 14336, 32 heads of 128, 8 key/value heads, V 128256.
H, MLP, Q, KV, V, HEADS = 4096, 14336, 4096, 1024, 128256, 32


def _job(tensor_parallel: int, *, ac: str = "none", nodes: int = 1, per_node: int = 8,
         seq: int = 4096) -> Job:
    return resolve(JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "tp"},
        "resources": {"nodes": nodes, "gpus_per_node": per_node, "accelerator": "H100-80GB"},
        "model": {"preset": "llama3-8b"},
        "parallelism": {"tensor_parallel": tensor_parallel},
        "fsdp": {"mixed_precision": "bf16", "activation_checkpointing": ac},
        "data": {"seq_len": seq, "micro_batch_size": 1,
                 "global_batch_size": nodes * per_node // tensor_parallel},
    }), Path("."))


def _point(job: Job, name: str) -> dict[str, int]:
    return next(p.terms for p in device_memory(job).points if p.name == name)


def test_parameters_gradients_and_states_are_sharded_over_dp_shard_times_tp() -> None:
    # 8 GPUs either way: FSDP over 8, or over 4 of TP 2's halves (the 8B's dims divide).
    one, two = _point(_job(1), "optimizer step"), _point(_job(2), "optimizer step")
    total, norms = 8_030_261_248, (2 * 32 + 1) * H  # norms: replicated over the TP group
    assert one["sharded_parameters"] == 4 * total // 8
    assert two["sharded_parameters"] == 4 * ((total - norms) // 8 + norms // 4)
    assert two["optimizer_states"] == 2 * two["sharded_parameters"]
    assert _job(2).layout.shard_size == 4


def test_a_layer_saves_its_sequence_shard_its_gathered_inputs_and_its_heads() -> None:
    t, b, k = 4096, 2, 4
    job = _job(k)
    norms = 2 * ((4 + b) * t * H // k + b * t * H)  # fp32 input, cast: shard; gathered: whole
    attention = b * t * (Q + KV) // k + b * t * KV // k + b * t * Q // k + 4 * HEADS // k * t
    mlp = 4 * b * t * MLP // k
    assert layer_bytes(job) == norms + attention + mlp


def test_checkpointed_inputs_are_sequence_shards_and_logits_vocabulary_shards() -> None:
    t, b, k = 4096, 2, 4
    full, split = _job(1, ac="full"), _job(k, ac="full")
    # At the head: 32 checkpointed inputs (b·T·H) and the final norm's own fp32 input and
    # cast ((4 + b)·T·H), each over 1/k of the positions; its gathered output is whole.
    one, many = (_point(j, "forward: lm_head")["activations"] for j in (full, split))
    assert one - many == (32 * b + 4 + b) * t * H * (k - 1) // k
    # Loss parallel, V/k logits each: forward the logits, their fp32 upcast, x − max and
    # its exp; backward the log-softmax, the scattered zeros, exp and their sum.
    assert _point(split, "forward: loss")["logits_and_loss"] == (b + 12) * t * V // k
    assert _point(split, "backward: loss")["logits_and_loss"] == 16 * t * V // k
    # The embedding's backward: a partial gradient of the whole vocabulary (b·V·H) beside
    # its reduce-scattered rows, the head's and the final norm's (untied).
    root = b * (2 * V * H // k + H)
    assert _point(split, "backward: embedding")["unsharded_gradients"] == root + b * V * H


def test_collectives_are_exposed_at_the_group_link_and_the_network_across_nodes() -> None:
    device = CATALOG["H100-80GB"]
    inside, across = _job(4, ac="full"), _job(4, ac="full", nodes=4, per_node=2)
    layers = 32
    assert tp.collectives_per_micro_batch(inside) == 2 * 4 * layers + 4 * layers + 4
    sent = 2 * 4096 * H * 3 / 4
    assert tp.bytes_per_collective(inside) == sent
    seconds = tp.micro_batch_seconds(inside, device)
    assert abs(seconds - 388 * sent / (450e9 * 0.9)) < 1e-9
    assert tp.spans_nodes(across) and not tp.spans_nodes(inside)
    assert abs(tp.micro_batch_seconds(across, device) / seconds - 450 / 50) < 1e-9
    step = plan_job(inside).step
    assert step is not None and step.exposed_communication_seconds >= seconds


def test_published_2d_run_fits_at_its_rate_and_without_tp_is_offered_tp() -> None:
    # torchtitan's Llama 3.1 405B, TP 8 × FSDP 16 on 128 H100: 109 tokens/s per GPU.
    result = run_cli("plan", str(EXAMPLE), "--format", "json")
    plan = json.loads(result.stdout)
    assert plan["fits"] and plan["shard_size"] == 16
    assert abs(plan["step_time"]["tokens_per_s_per_device"] / 109 - 1) <= 0.15
    alone = run_cli("plan", str(EXAMPLE), "--format", "json",
                    "--set", "parallelism.tensor_parallel=1",
                    "--set", "data.global_batch_size=256")
    assert alone.returncode == 1
    plan = json.loads(alone.stdout)
    assert not plan["fits"] and plan["min_gpus"] is None
    offered = {s["override"]: s["fits"] for s in plan["suggestions"]}
    assert offered["parallelism.tensor_parallel=8"] and offered["parallelism.tensor_parallel=4"]
    assert plan["min_gpus_tensor_parallel"]["tensor_parallel"] in (4, 8)
    assert any(o.startswith("parallelism.tensor_parallel=")
               for o in plan["fitting_levers"]["overrides"])


def test_tune_of_70b_on_64_h100_ranks_tensor_parallel_and_its_winner_validates(
        tmp_path: Path) -> None:
    best = tmp_path / "best.yaml"
    # Every lever but float8, whose FP8 peak would fill the table without TP.
    levers = ("parallelism.tensor_parallel", "fsdp.sharding_strategy",
              "fsdp.activation_checkpointing", "data.micro_batch_size", "fsdp.cpu_offload")
    result = run_cli("tune", str(SEVENTY), *(a for k in levers for a in ("--vary", k)),
                     "--format", "json", "-o", str(best))
    assert result.returncode == 0, result.stderr
    ranked = json.loads(result.stdout)["candidates"]  # each validated
    degrees = {o for c in ranked for o in c["overrides"]
               if o.startswith("parallelism.tensor_parallel=")}
    assert degrees & {"parallelism.tensor_parallel=2", "parallelism.tensor_parallel=4",
                      "parallelism.tensor_parallel=8"}
    assert run_cli("validate", str(best)).returncode == 0
