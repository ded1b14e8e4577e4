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


def test_mixtral_experts_over_16_ranks_are_sharded_by_width_not_padded() -> None:
    # Over 16 ranks the 8 experts are sharded on dim 1 (2I = 28,672 and H = 4,096 split
    # evenly), as the engine's shard_placement_fn places them: the experts unpadded,
    # where dim 0 gave every rank one whole expert row, half of them padding (21.4 GiB,
    # traced); only the 8-row routers are padded now (256 KiB in all).
    sharded = sharding(resolve(spec("mixtral-8x7b", nodes=2), BASE, geometry=MIXTRAL))
    held = 4 * sharded.total_shard_numel()  # fp32 bytes on one rank
    assert held - 4 * MIXTRAL.total_params // 16 == 256 * 1024
    assert round(held / GIB, 2) == 10.87


def test_an_uneven_dim_1_keeps_the_experts_on_dim_0() -> None:
    # FSDP2 refuses an uneven split of a dim other than 0: over 14 ranks Mixtral's
    # down_proj (8, 4096, 14336) cannot split 4096 in 14, so it stays on dim 0 (one
    # padded expert row a rank) while gate_up_proj (8, 28672, 4096) splits its width.
    from fsdpspec.job.experts import expert_shard_dim

    assert expert_shard_dim((8, 28672, 4096), 14) == 1
    assert expert_shard_dim((8, 4096, 14336), 14) == 0
    assert expert_shard_dim((8, 4096, 14336), 8) == 0  # not more ranks than experts
    sh = sharding(resolve(spec("mixtral-8x7b"), BASE, geometry=MIXTRAL).at_world(14))
    layer = sh.units[0]
    assert sh.tensor_shards(layer)[-2:] == [(8 * 2048 * 4096, 1), (1 * 4096 * 14336, 1)]


SCALE_SPEC = Path(__file__).with_name("specs") / "mixtral-8x7b-64-h100.yaml"


def _plan_json(gpus: int) -> dict[str, Any]:
    return json.loads(run_cli("plan", str(SCALE_SPEC), "--gpus", str(gpus),
                              "--format", "json").stdout)


def test_mixtral_on_64_h100_fits_and_keeps_scaling() -> None:
    """Issue 44's named case: Mixtral 8x7B on 64 H100-80GB (FULL_SHARD, bf16, full AC,
    seq 4096, micro-batch 1, global batch 64). With the experts on dim 0 it needed
    181 GiB a GPU at 64 (798 at 512) and fit on no number of GPUs."""
    at = {gpus: _plan_json(gpus) for gpus in (8, 16, 64, 512)}
    plan = at[64]
    assert plan["fits"] and plan["world_size"] == 64
    sharded = plan["memory"]["device"]["terms"]["sharded_parameters"]
    assert abs(sharded / (4 * 46.7e9 / 64) - 1) < 0.05
    assert isinstance(plan["min_gpus"], int) and plan["min_gpus"] <= 64
    totals = [at[g]["memory"]["device"]["total_bytes"] for g in (8, 16, 64, 512)]
    assert totals == sorted(totals, reverse=True)


def test_one_verdict_bounds_the_mixtral_step() -> None:
    """The "likely …-bound" words are the predicted step's verdict, and the collectives'
    seconds printed beside the compute fit in the step that overlaps them (at 64 they
    were 57.1 s beside a 7.9 s step, at one NIC's bandwidth, while the step used the
    node's eight)."""
    for gpus in (8, 64, 512):
        plan = _plan_json(gpus)
        step, compute = plan["step_time"], plan["compute"]
        assert compute["communication_seconds"] <= step["seconds"], gpus
        assert compute["communication_bound"] == (step["bound"] == "communication")
        text = run_cli("plan", str(SCALE_SPEC), "--gpus", str(gpus)).stdout
        assert f"likely {step['bound']}-bound" in text
        assert text.count("-bound") == 2  # the collectives' line and the predicted step


def test_experts_that_divide_the_group_are_not_padded() -> None:
    # Over 8 ranks each rank holds one expert of each layer (dim 0: the degree does not
    # exceed the experts), and every other dim 0 (4096, 1024, 8, 32000) divides too: no
    # padding at all.
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
