"""Expert parallelism in the plan: each rank's E ÷ ep experts sharded over efsdp, the
dispatch buffers and all-to-alls under balanced routing, their exposed time in the step,
and the fewest-GPUs answer that offers EP where FSDP alone fits nowhere (issue 44)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from conftest import run_cli
from fsdpspec.job.job import resolve
from fsdpspec.plan import expert_parallel as ep
from fsdpspec.plan.memory import GIB, device_memory
from fsdpspec.plan.planner import plan_job
from fsdpspec.plan.suggest import apply_override
from fsdpspec.plan.unit_shards import sharding
from fsdpspec.validate import check_file

SPECS = Path(__file__).with_name("specs")
MIXTRAL = SPECS / "mixtral-8x7b-64-h100.yaml"
DEEPSEEK = SPECS / "deepseek-v3-256-h100.yaml"
# Mixtral 8x7B: 8 experts of (2 × 14336, 4096) and (4096, 14336) per layer, top-2.
EXPERT = 3 * 14336 * 4096


def _mixtral(degree: int):
    job = resolve(check_file(MIXTRAL).spec, MIXTRAL.parent)
    return job.with_spec(apply_override(job.spec, f"parallelism.expert_parallel={degree}"))


def test_each_rank_holds_its_own_experts_sharded_over_efsdp() -> None:
    dense, split = _mixtral(1), _mixtral(8)
    assert (split.layout.dims.ep, split.layout.dims.efsdp) == (8, 8)
    a, b = sharding(dense), sharding(split)
    layer = b.units[0]
    # The same state per rank (8 experts ÷ 8 ranks, each over 8 more = ÷ 64 either way) ...
    assert b.total_shard_numel() == a.total_shard_numel()
    # ... but a layer gathers its one local expert, not all eight.
    experts_gathered = b.gathered_numel(layer) - b.shard_size * sum(
        k * n for k, n in b.dense_shards(layer))
    assert experts_gathered == EXPERT
    assert a.gathered_numel(layer) - b.gathered_numel(layer) == 7 * EXPERT
    # One expert over 8 ranks: sharded by width (dim 1), as torchtitan's efsdp × ep > E.
    assert b.resharded_expert_numel(layer) == EXPERT


def test_dispatch_buffers_and_all_to_alls_assume_a_balanced_router() -> None:
    job = _mixtral(8)
    tokens, k, hidden, bf16 = 4096, 2, 4096, 2
    # Send and receive buffers of one all-to-all: every routed row of the micro-batch.
    assert ep.dispatch_bytes(job) == 2 * bf16 * tokens * k * hidden
    memory = device_memory(job)
    assert memory.peak.terms["dispatch_buffers"] == ep.dispatch_bytes(job)
    assert device_memory(_mixtral(1)).peak.terms["dispatch_buffers"] == 0
    # 32 MoE layers, full AC: 2 all-to-alls in forward, 2 in backward, 2 recomputed.
    assert ep.all_to_alls_per_micro_batch(job) == 2 * (2 * 32 + 32)
    assert ep.step_bytes(job) == int(192 * bf16 * tokens * k * hidden * 7 / 8)


def test_all_to_alls_are_exposed_in_the_step_and_the_verdict_is_one() -> None:
    plan, base = plan_job(_mixtral(8)), plan_job(_mixtral(1))
    a2a = ep.micro_batch_seconds(plan.job, plan.accelerator)
    assert a2a > 0 and plan.step.exposed_communication_seconds >= a2a
    assert plan.compute.expert_parallel_bytes == ep.step_bytes(plan.job)
    assert plan.compute.communication_seconds <= plan.step.seconds
    assert base.compute.expert_parallel_bytes == 0
    text = run_cli("plan", str(MIXTRAL), "--set", "parallelism.expert_parallel=8").stdout
    assert f"likely {plan.step.bound}-bound" in text and text.count("-bound") == 2
    assert "assumes a perfectly balanced router" in text


def test_groups_across_nodes_send_the_off_node_share_over_the_network() -> None:
    inside, across = _mixtral(8), _mixtral(16)
    device = plan_job(inside).accelerator
    assert not ep.spans_nodes(inside) and ep.spans_nodes(across)
    # Inside a node: 7 peers' rows over NVLink. Across two nodes: 8 peers' over the NIC.
    rows = 2 * 4096 * 2 * 4096
    latency = device.collective_latency_us * 1e-6
    per = rows / 8 * 7 / (device.intra_node_gbps * 1e9 * 0.9) + latency
    assert math.isclose(ep.micro_batch_seconds(inside, device), 192 * per)
    per = rows / 16 * 8 / (device.inter_node_gbps * 1e9 * 0.9) + latency
    assert math.isclose(ep.micro_batch_seconds(across, device), 192 * per)


def test_deepseek_v3_fits_nowhere_under_fsdp_and_fits_with_the_offered_ep() -> None:
    """Issue 44's named case: DeepSeek-V3 (public config.json) on H100-80GB. FSDP alone:
    one layer's 256 experts gather 22 GiB, with the prefetch and the reduce-scatter over
    130 GiB a GPU at any count; EP 8 gathers 32 of them."""
    fsdp_only = run_cli("plan", str(DEEPSEEK))
    assert "device: DOES NOT FIT: 139.6 of 79.1 GiB" in fsdp_only.stdout
    offer = "fewest H100-80GB that fit: none up to 4096 nodes; 256 with --set " \
            "parallelism.expert_parallel=8"
    assert offer in fsdp_only.stdout
    refused = run_cli("validate", str(DEEPSEEK))
    assert refused.returncode == 1 and "FS201" in refused.stdout
    assert "(256 do with --set parallelism.expert_parallel=8)" in refused.stdout
    with_ep = json.loads(run_cli("plan", str(DEEPSEEK), "--set", "parallelism.expert_parallel=8",
                                 "--format", "json").stdout)
    assert with_ep["fits"] and with_ep["world_size"] == 256
    assert with_ep["memory"]["device"]["total_bytes"] / GIB < 79.1 * 0.9
    assert run_cli("validate", str(DEEPSEEK), "--set",
                   "parallelism.expert_parallel=8").returncode == 0


def test_deepseek_v3_preset_plans_as_its_public_config_json() -> None:
    """Issue 45: `model.preset: deepseek-v3` is the public config.json's model, counted
    from the model transformers builds on the meta device: 671.0B parameters, 37.6B of
    them active per token (the top 8 of 256 routed experts, the shared one and the
    three dense layers), and the same verdict and EP offer as the config.json."""
    as_preset = ("--set", "model.hf_config=null", "--set", "model.preset=deepseek-v3")
    preset = json.loads(run_cli("plan", str(DEEPSEEK), *as_preset, "--format", "json").stdout)
    public = json.loads(run_cli("plan", str(DEEPSEEK), "--format", "json").stdout)
    assert preset["parameters"] == public["parameters"]
    assert (preset["parameters"]["total"], preset["parameters"]["active"]) == (
        671_026_404_352, 37_552_282_624)
    assert preset["memory"] == public["memory"] and not preset["fits"]
    text = run_cli("plan", str(DEEPSEEK), *as_preset).stdout
    assert "671.03B parameters (37.55B active per token)" in text
    assert "256 with --set parallelism.expert_parallel=8" in text


def test_glm_4_5_air_preset_plans_its_dense_first_layer_and_shared_experts() -> None:
    """Issue 45: `model.preset: glm-4.5-air` (one dense layer, then 128 routed experts and
    a shared one) on Mixtral's 64 H100s: 106.9B parameters, 13.4B active; it fits, on 48
    alone, and on 32 with expert parallelism 2 (128 experts split whole)."""
    air = ("--set", "model.preset=glm-4.5-air")
    plan = json.loads(run_cli("plan", str(MIXTRAL), *air, "--format", "json").stdout)
    assert (plan["parameters"]["total"], plan["parameters"]["active"]) == (
        106_852_245_504, 13_424_123_904)
    assert plan["fits"] and plan["parameters"]["source"] == "introspected"
    text = run_cli("plan", str(MIXTRAL), *air).stdout
    assert "fewest H100-80GB that fit: 48 (6 whole nodes of 8" in text
    assert "32 with --set parallelism.expert_parallel=2" in text

def test_llama4_scout_has_no_experts_module_to_split() -> None:
    """Issue 45: transformers runs each of Llama 4's 16 experts on every token and names
    no experts module to dispatch to, so the plan shards its stacked experts as any
    tensor (16 rows over 64 ranks: each holds a padded sixteenth) and fits no number of
    H100s; expert parallelism is refused naming the model, not as a dense one's."""
    scout = ("--set", "model.preset=llama4-scout")
    plan = run_cli("plan", str(MIXTRAL), *scout).stdout
    assert "107.77B parameters (introspected: model_type llama4_text)" in plan
    assert "fewest H100-80GB that fit: none up to 4096 nodes" in plan
    refused = run_cli("validate", str(MIXTRAL), *scout, "--set", "parallelism.expert_parallel=4",
                      "--format", "concise")
    assert refused.returncode == 1
    assert ("FS160 error expert_parallel 4 on a Llama 4 model (a Mixture of Experts, "
            "transformers' llama4_text) whose transformers config names no experts module "
            "to dispatch tokens to (base_model_ep_plan)") in refused.stdout
