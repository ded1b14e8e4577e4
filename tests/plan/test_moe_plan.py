"""Mixture-of-Experts plans: sharded experts with FSDP's padding, dispatch buffers and
router loss, compute from active parameters, and what `plan` prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import run_cli
from fsdpspec.catalog.presets import preset_config
from fsdpspec.job.geometry import geometry_from_config
from fsdpspec.job.job import resolve
from fsdpspec.plan import activations as act
from fsdpspec.plan.compute import step_flops
from fsdpspec.plan.memory import GIB
from fsdpspec.plan.planner import plan_job
from fsdpspec.plan.unit_shards import sharding
from fsdpspec.spec.v1 import JobSpec

BASE = Path(".")  # presets and inline geometries: no input paths

MIXTRAL = geometry_from_config(preset_config("mixtral-8x7b"))
TINY = geometry_from_config(preset_config("tiny-mixtral"))


def spec(preset: str, nodes: int = 1, **fsdp: Any) -> JobSpec:
    return JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "moe"},
        "resources": {"nodes": nodes, "gpus_per_node": 8, "accelerator": "H100-80GB"},
        "model": {"preset": preset}, "fsdp": {"mixed_precision": "bf16", **fsdp},
        "data": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 8 * nodes},
    })


def test_mixtral_experts_over_16_ranks_are_padded_to_one_expert_per_rank() -> None:
    # FSDP2 shards each expert tensor on dim 0 (the 8 experts): over 16 ranks every
    # rank holds one whole expert row, half of them padding. Traced: 21.4 GiB.
    sharded = sharding(resolve(spec("mixtral-8x7b", nodes=2), BASE, geometry=MIXTRAL))
    held = 4 * sharded.total_shard_numel()  # fp32 bytes on one rank
    assert round(held / GIB, 1) == 21.4
    assert round(4 * MIXTRAL.total_params / 16 / GIB, 1) == 10.9


def test_experts_that_divide_the_group_are_not_padded() -> None:
    # Over 8 ranks each rank holds one expert of each layer, and every other dim 0
    # (4096, 1024, 8, 32000) divides too: no padding at all.
    sharded = sharding(resolve(spec("mixtral-8x7b"), BASE, geometry=MIXTRAL))
    assert sharded.total_shard_numel() * 8 == MIXTRAL.total_params


def test_dispatch_buffers_per_routed_token() -> None:
    # 8 tokens routed to 2 experts each: 16 rows of hidden 64 and expert width 128.
    rows = 8 * 2
    dense = act.layer_activation_bytes(TINY, 2, 1, 8, "sdpa") - act.mlp_activation_bytes(TINY, 2, 8)
    moe = (2 * rows * (2 * 64 + 4 * 128)   # gathered rows, expert output; gate_up, act, product
           + 4 * 8 * 4 + 40 * rows)        # fp32 router probabilities, routing indices
    assert act.layer_activation_bytes(TINY, 2, 1, 8, "sdpa") == dense + moe


def test_router_loss_is_a_point_of_its_own_at_the_lm_head() -> None:
    plan = plan_job(resolve(spec("tiny-mixtral"), BASE, config=preset_config("tiny-mixtral")))
    at_head = next(p for p in plan.device.points if p.name == "forward: lm_head")
    logits = 2 * 2048 * TINY.vocab_size
    assert at_head.terms["logits_and_loss"] == logits + act.router_loss_bytes(TINY, 2, 1, 2048)
    assert act.router_loss_bytes(TINY, 2, 1, 2048) == 2 * 2 * 2048 * (2 + 6 * 2 * 2) * 4 // 2


def test_compute_counts_active_parameters() -> None:
    s = spec("mixtral-8x7b")
    plan = plan_job(resolve(s, BASE, config=preset_config("mixtral-8x7b")))
    assert plan.compute.flops == step_flops(plan.job, MIXTRAL.active_params)
    assert MIXTRAL.active_params < MIXTRAL.total_params / 3


def test_plan_prints_total_and_active_parameters(tmp_path) -> None:
    job = tmp_path / "moe.yaml"
    job.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: moe}\n"
                   "resources: {gpus_per_node: 8, accelerator: H100-80GB}\n"
                   "model: {preset: mixtral-8x7b}\nfsdp: {mixed_precision: bf16}\n"
                   "data: {seq_len: 2048, micro_batch_size: 1, global_batch_size: 8}\n")
    text = run_cli("plan", str(job))
    assert "46.70B parameters (12.88B active per token)" in text.stdout.splitlines()[0]
    data = json.loads(run_cli("plan", str(job), "--format", "json").stdout)["parameters"]
    assert (data["total"], data["active"], data["source"]) == (
        46_702_792_704, 12_879_925_248, "analytic")
