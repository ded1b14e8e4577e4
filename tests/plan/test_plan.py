"""The memory model term by term, against byte counts worked out by hand.

The model is tiny-llama: hidden 64, MLP 128, 2 layers, 4 heads (2 key/value heads of 16),
vocabulary 320. Per layer: q 64×64, k 32×64, v 32×64, o 64×64, gate/up 128×64,
down 64×128, two norms of 64 = 36 992 parameters. Outside the layers: embeddings 320×64,
final norm 64, lm_head 320×64 = 41 024. Total 115 008. A micro-batch is 1 × 8 tokens.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from fsdpspec.catalog.presets import preset_config
from fsdpspec.job.geometry import geometry_from_config
from fsdpspec.job.job import resolve
from fsdpspec.plan import activations as act
from fsdpspec.plan.compute import step_flops
from fsdpspec.plan.host import PROCESS_OVERHEAD_BYTES, host_memory
from fsdpspec.plan.memory import device_memory
from fsdpspec.plan.planner import plan_job
from fsdpspec.plan.view import plan_json
from fsdpspec.spec.v1 import JobSpec

BASE = Path(".")  # presets and inline geometries: no input paths

CONFIG = preset_config("tiny-llama")
GEOMETRY = geometry_from_config(CONFIG)
LAYER, ROOT, TOTAL = 36_992, 41_024, 115_008


def make_spec(**sections: Any) -> JobSpec:
    data: dict[str, Any] = {
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "t"},
        "resources": {"nodes": 1, "gpus_per_node": 4, "accelerator": "H100-80GB"},
        "model": {"preset": "tiny-llama"},
        "fsdp": {"mixed_precision": "bf16"},
        "data": {"seq_len": 8, "micro_batch_size": 1, "global_batch_size": 4},
    }
    for section, values in sections.items():
        data[section] = data.get(section, {}) | values
    return JobSpec.model_validate(data)


def points(**sections: Any) -> dict[str, dict[str, int]]:
    memory = device_memory(resolve(make_spec(**sections), BASE, geometry=GEOMETRY))
    return {p.name: {k: v for k, v in p.terms.items() if v} for p in memory.points}


def test_geometry_of_the_worked_example() -> None:
    assert (GEOMETRY.layer_params, GEOMETRY.root_params, GEOMETRY.total_params) == (
        LAYER, ROOT, TOTAL)


# FULL_SHARD over 4 ranks, bf16 compute, fp32 reduce, AdamW.
STATES = {"sharded_parameters": 4 * TOTAL // 4, "optimizer_states": 2 * 4 * TOTAL // 4}
ACTIVATIONS = 2 * (
    2 * (4 + 2 * 2) * 8 * 64            # two norms: fp32 input, cast, output
    + 2 * 8 * (64 + 32) + 2 * 8 * 32    # rotated q and k, v
    + 2 * 8 * 64 + 4 * 4 * 8            # attention output, log-sum-exp
    + 4 * 2 * 8 * 128                   # gate, activation, up, product
)  # = 2 × 19 584
ROOT_ACTIVATIONS = (4 + 2 * 2) * 8 * 64 + 2 * 2 * 8 * 16   # final norm, rotary cos/sin
LOGITS = 2 * 8 * 320  # bf16 logits of 8 tokens
ROOT_BF16, LAYER_BF16 = 2 * ROOT, 2 * LAYER


def test_full_shard_points() -> None:
    found = points()
    # Forward keeps each all-gather output until the next unit's copy-out is done: the
    # root's beside layer 0's, layer 0's beside layer 1's, layer 1's until lm_head ends.
    assert found["forward: root all-gather"] == STATES | {"gathered_parameters": 2 * ROOT_BF16}
    entering = 2 * 8 * (64 + 2 * 16)  # hidden states and rotary cos/sin, bf16
    assert found["forward: layer 0 all-gather"] == STATES | {
        "gathered_parameters": ROOT_BF16 + LAYER_BF16,
        "prefetch_buffer": ROOT_BF16 + LAYER_BF16, "activations": entering}
    assert found["forward: layer 1 all-gather"] == STATES | {
        "gathered_parameters": ROOT_BF16 + LAYER_BF16, "prefetch_buffer": 2 * LAYER_BF16,
        "activations": entering + ACTIVATIONS // 2}
    assert found["forward: lm_head"] == STATES | {
        "gathered_parameters": ROOT_BF16 + LAYER_BF16, "prefetch_buffer": LAYER_BF16,
        "activations": ACTIVATIONS + ROOT_ACTIVATIONS, "logits_and_loss": LOGITS}
    # The root and the last layer stay gathered from forward into backward: the root is
    # never all-gathered a second time, so nothing is prefetched around the loss.
    assert found["forward: loss"] == STATES | {
        "gathered_parameters": ROOT_BF16 + LAYER_BF16,
        "activations": ACTIVATIONS + ROOT_ACTIVATIONS,
        "logits_and_loss": LOGITS + 4 * 8 * 320 + 4 * 8 * 320}
    assert found["backward: loss"] == STATES | {
        "gathered_parameters": ROOT_BF16 + LAYER_BF16,
        "activations": ACTIVATIONS + ROOT_ACTIVATIONS, "logits_and_loss": 12 * 8 * 320}
    assert list(found)[3:7] == ["forward: lm_head", "forward: loss", "backward: loss",
                                "backward: lm_head"]
    assert found["backward: lm_head"] == STATES | {
        "gathered_parameters": ROOT_BF16 + LAYER_BF16, "unsharded_gradients": 2 * 320 * 64,
        "activations": ACTIVATIONS + ROOT_ACTIVATIONS, "logits_and_loss": LOGITS}


def test_layer_and_reduction_points() -> None:
    found = points()
    grads = 2 * 320 * 64 + 2 * 64 * 128   # lm_head gradient + the down projection's
    temporaries = 2 * 2 * 8 * 128 + 2 * 8 * 64
    common = STATES | {"gathered_parameters": ROOT_BF16 + LAYER_BF16,
                       "unsharded_gradients": grads, "backward_temporaries": temporaries}
    # The last layer: every activation alive, the layer below prefetched.
    assert found["backward: layer 1"] == common | {"activations": ACTIVATIONS,
                                                   "prefetch_buffer": LAYER_BF16}
    # The first: nothing left to prefetch, layer 1 reduced and its buffer still held.
    assert found["backward: layer 0"] == common | {
        "activations": ACTIVATIONS // 2, "sharded_gradients": 4 * LAYER // 4,
        "reduce_scatter_buffers": 4 * LAYER}
    # Layer 1's post-backward: resharded, its activations freed, its whole bf16 gradient
    # and the fp32 reduce-scatter input at once, layer 0 prefetched.
    assert found["backward: layer 1 reduction"] == STATES | {
        "gathered_parameters": ROOT_BF16, "prefetch_buffer": LAYER_BF16,
        "unsharded_gradients": 2 * 320 * 64 + LAYER_BF16, "reduce_scatter_buffers": 4 * LAYER,
        "activations": ACTIVATIONS // 2}
    # The embedding's backward: the root still gathered, layer 0's reduce-scatter input
    # held, the root's gradients (untied: lm_head's and the embedding's) alive.
    assert found["backward: embedding"] == STATES | {
        "sharded_gradients": 4 * 2 * LAYER // 4, "gathered_parameters": ROOT_BF16,
        "unsharded_gradients": ROOT_BF16, "reduce_scatter_buffers": 4 * LAYER}
    assert found["backward: root gradient reduction"] == STATES | {
        "sharded_gradients": 4 * 2 * LAYER // 4, "unsharded_gradients": ROOT_BF16,
        "reduce_scatter_buffers": 4 * ROOT}
    assert found["optimizer step"] == STATES | {"sharded_gradients": TOTAL,
                                                "optimizer_temporaries": TOTAL}


def test_peak_is_the_largest_point_and_reserved_adds_fragmentation() -> None:
    memory = device_memory(resolve(make_spec(), BASE, geometry=GEOMETRY))
    assert memory.peak.name == "backward: layer 1 reduction"
    assert memory.peak_allocated == 783_552
    assert memory.peak_reserved == 783_552 + int(0.05 * 783_552)
    assert memory.total == memory.peak_reserved + (1 << 30)  # CUDA context + NCCL


def test_fsdp2_pads_each_tensor_and_fsdp1_the_flat_unit() -> None:
    three = {"resources": {"gpus_per_node": 3}, "data": {"global_batch_size": 3}}
    # dim 0 rounded up to a multiple of 3 per tensor: 12 588 per layer, 13 718 outside.
    fsdp2 = points(**three)["optimizer step"]["sharded_parameters"]
    assert fsdp2 == 4 * (2 * 12_588 + 13_718)
    # FSDP1 pads the flat parameter of each unit: ceil(36 992 / 3), ceil(41 024 / 3).
    fsdp1 = points(fsdp={"version": 1, "mixed_precision": "bf16"}, **{
        k: v for k, v in three.items()})["optimizer step"]["sharded_parameters"]
    assert fsdp1 == 4 * (2 * 12_331 + 13_675)


@pytest.mark.parametrize(("strategy", "nodes", "shard"), [
    ("NO_SHARD", 1, 1), ("HYBRID_SHARD", 2, 4), ("HYBRID_SHARD_ZERO2", 2, 4),
    ("SHARD_GRAD_OP", 2, 8)])
def test_shard_group_per_strategy(strategy: str, nodes: int, shard: int) -> None:
    spec = make_spec(resources={"nodes": nodes}, fsdp={"sharding_strategy": strategy},
                     data={"global_batch_size": 4 * nodes})
    w = resolve(spec, BASE, geometry=GEOMETRY)
    assert w.layout.shard_size == shard
    assert points(resources={"nodes": nodes}, fsdp={"sharding_strategy": strategy},
                  data={"global_batch_size": 4 * nodes})["optimizer step"][
        "sharded_parameters"] == 4 * TOTAL // shard


def test_shard_grad_op_keeps_every_unit_gathered_and_prefetches_nothing() -> None:
    found = points(fsdp={"sharding_strategy": "SHARD_GRAD_OP"})
    assert found["forward: loss"]["gathered_parameters"] == ROOT_BF16 + 2 * LAYER_BF16
    assert "prefetch_buffer" not in found["backward: layer 1"]


def test_accumulation_carries_sharded_gradients_between_micro_batches() -> None:
    # The engine reduces every micro-batch: the fp32 sharded gradients persist.
    found = points(data={"global_batch_size": 8})
    assert found["forward: loss"]["accumulated_gradients"] == 4 * TOTAL // 4
    assert "sharded_gradients" not in found["backward: layer 0"]  # accumulated in place
    assert found["backward: layer 1"]["unsharded_gradients"] > 0


def test_no_shard_accumulation_keeps_unsharded_gradients_in_the_reduce_dtype() -> None:
    found = points(fsdp={"sharding_strategy": "NO_SHARD"}, data={"global_batch_size": 8})
    assert found["forward: loss"]["accumulated_gradients"] == 4 * TOTAL
    assert "unsharded_gradients" not in found["backward: layer 1"]


def test_no_shard_in_full_precision_is_planned_as_ddp() -> None:
    """DDP (`runs_as_ddp`): parameters, buckets and states whole on every rank at every
    moment, nothing gathered or reduced into a buffer; under accumulation the old
    buckets of the second step's rebuild through its last micro-batch."""
    ddp = {"sharding_strategy": "NO_SHARD", "mixed_precision": "fp32"}
    whole = {"sharded_parameters": 4 * TOTAL, "gradient_buckets": 4 * TOTAL,
             "optimizer_states": 2 * 4 * TOTAL}
    alone, accumulating = points(fsdp=ddp), points(fsdp=ddp, data={"global_batch_size": 8})
    for found in (alone, accumulating):
        for name, terms in found.items():
            assert terms.items() >= whole.items(), name
            assert not {"gathered_parameters", "reduce_scatter_buffers",
                        "sharded_gradients"} & terms.keys(), name
        # Backward holds the gradient just computed beside the buckets, not the head's.
        assert found["backward: layer 1"]["unsharded_gradients"] == 4 * 64 * 128
    assert all("accumulated_gradients" not in terms for terms in alone.values())
    assert accumulating["backward: loss"]["accumulated_gradients"] == 4 * TOTAL
    assert "gradient_buckets" not in points(fsdp={"sharding_strategy": "NO_SHARD"})["forward: loss"]


def test_full_checkpointing_keeps_layer_inputs_and_recomputes_one_layer() -> None:
    found = points(fsdp={"activation_checkpointing": "full"})
    assert found["forward: loss"]["activations"] == 2 * (2 * 8 * 64) + ROOT_ACTIVATIONS
    assert found["backward: layer 1"]["activations"] == 2 * (2 * 8 * 64) + ACTIVATIONS // 2
    assert found["backward: layer 0"]["activations"] == 2 * 8 * 64 + ACTIVATIONS // 2


def test_selective_checkpointing_wraps_one_layer_in_every_n() -> None:
    found = points(fsdp={"activation_checkpointing": "selective", "ac_every": 2})
    # Layer 0 is checkpointed, layer 1 keeps its activations (and is last: no recompute).
    assert found["forward: loss"]["activations"] == (
        2 * 8 * 64 + ACTIVATIONS // 2 + ROOT_ACTIVATIONS)


def test_eager_attention_saves_the_probabilities() -> None:
    eager = points(model={"attention": "eager"})["backward: layer 1"]["activations"]
    per_layer = eager // 2 - (ACTIVATIONS // 2 - (2 * 8 * 96 + 2 * 8 * 32 + 2 * 8 * 64 + 128))
    # q, k and v expanded to 4 heads, the output copy, fp32 softmax and its bf16 cast.
    assert per_layer == 4 * 2 * 8 * 64 + (4 + 2) * 1 * 4 * 8 * 8


def test_eager_phi3_without_grouped_query_attention_keeps_the_fused_qkv() -> None:
    # Phi-3 with as many key/value heads as heads: v is not expanded, and the view the
    # probabilities' matmul saves keeps the whole fused qkv output (q + 2kv) alive.
    fused = dataclasses.replace(GEOMETRY, family="phi3", fused_qkv=True,
                                num_kv_heads=4)
    plain = dataclasses.replace(fused, fused_qkv=False)
    extra = (act.layer_activation_bytes(fused, 2, 1, 8, "eager")
             - act.layer_activation_bytes(plain, 2, 1, 8, "eager"))
    assert extra == 2 * 8 * (64 + 2 * 64) - 2 * 8 * 64


def test_fp32_and_sgd() -> None:
    found = points(fsdp={"mixed_precision": "fp32"}, optimizer={"name": "sgd"})
    step = found["optimizer step"]
    assert step["optimizer_states"] == TOTAL  # one momentum buffer
    assert "optimizer_temporaries" not in step
    assert found["forward: lm_head"]["gathered_parameters"] == 4 * (ROOT + LAYER)


def test_cpu_offload_moves_states_off_the_device() -> None:
    step = points(fsdp={"cpu_offload": True})["optimizer step"]
    assert "sharded_parameters" not in step and "optimizer_states" not in step


def test_host_memory_terms() -> None:
    spec = make_spec(fsdp={"cpu_offload": True, "state_dict_type": "FULL_STATE_DICT"},
                     model={"weights": "weights/"})
    host = host_memory(resolve(spec, BASE, geometry=GEOMETRY), TOTAL)
    assert host.terms == {
        "process_overhead": 4 * PROCESS_OVERHEAD_BYTES,
        "offloaded_states": 4 * TOTAL * (2 + 2),          # params, grads, 2 AdamW states
        "weight_loading": 2 * TOTAL,                      # rank 0 reads bf16 files
        "full_state_dict_gather": 4 * TOTAL * 3,          # fp32 params and AdamW state
        # the largest unit (a layer) read in fp32 and cast to bf16, and the one bf16 shard
        "final_export": LAYER * (4 + 2) + 2 * TOTAL,
    }
    assert host.peak_phase == "checkpoint save"
    assert host.peak == 4 * PROCESS_OVERHEAD_BYTES + 4 * TOTAL * 4 + 4 * TOTAL * 3


def test_every_rank_reads_weights_without_ram_efficient_loading() -> None:
    spec = make_spec(fsdp={"cpu_ram_efficient_loading": False}, model={"weights": "w/"})
    host = host_memory(resolve(spec, BASE, geometry=GEOMETRY), TOTAL)
    assert host.terms["weight_loading"] == 4 * 2 * TOTAL


def test_flops_follow_6n_plus_attention() -> None:
    w = resolve(make_spec(), BASE, geometry=GEOMETRY)
    assert step_flops(w, TOTAL) == (6 * TOTAL + 12 * 2 * 64 * 8) * 8


def test_plan_json_has_the_stable_keys() -> None:
    data = plan_json(plan_job(resolve(make_spec(), BASE, config=CONFIG)))
    assert data["parameters"]["total"] == TOTAL
    assert data["world_size"] == 4
    device = data["memory"]["device"]
    assert device["peak_allocated_bytes"] == 783_552
    assert device["peak_reserved_bytes"] > device["peak_allocated_bytes"]
    assert device["capacity_bytes"] == int(79.1 * (1 << 30))
    assert set(device["terms"]) >= {"sharded_parameters", "activations", "logits_and_loss"}
    assert data["memory"]["host"]["peak_bytes"] > 0
    assert data["fits"] is True and data["min_gpus"] == 4
    assert isinstance(data["suggestions"], list)


def test_fewest_gpus_steps_by_node_and_suggestions_rank_by_bytes_saved() -> None:
    spec = make_spec(resources={"gpus_per_node": 8, "accelerator": "H100-80GB"},
                     model={"preset": "llama3-8b"}, data={"seq_len": 4096,
                                                          "global_batch_size": 8})
    plan = plan_job(resolve(spec, BASE, config=preset_config("llama3-8b")), world_size=1)
    assert not plan.fits and plan.min_gpus == 8
    saved = [s.saves_bytes for s in plan.suggestions]
    assert saved == sorted(saved, reverse=True) and saved[0] > 0


def test_fewest_gpus_is_found_where_huge_world_sizes_pad_back_up() -> None:
    """405B: per-rank memory falls to a fit near 456 ranks, while at tens of thousands of
    ranks the padding of small tensors makes it grow again; the search must not give up
    because the largest world size does not fit."""
    spec = make_spec(resources={"nodes": 16, "gpus_per_node": 8, "accelerator": "H100-80GB"},
                     model={"preset": "llama3.1-405b"},
                     fsdp={"mixed_precision": "bf16", "activation_checkpointing": "full"},
                     data={"seq_len": 4096, "global_batch_size": 128},
                     launch={"rdzv_endpoint": "head:29500"})
    config = preset_config("llama3.1-405b")
    plan = plan_job(resolve(spec, BASE, config=config))
    assert not plan.fits and plan.min_gpus is not None and plan.min_gpus % 8 == 0
    usable = 0.9 * plan.capacity
    job = plan.job
    assert plan_job(job, world_size=plan.min_gpus).device.total <= usable
    assert plan_job(job, world_size=plan.min_gpus - 8).device.total > usable


def test_cpu_accelerator_is_judged_against_host_memory() -> None:
    spec = make_spec(resources={"accelerator": "cpu", "host_memory_gib": 9})
    plan = plan_job(resolve(spec, BASE, config=CONFIG))
    assert plan.capacity == (9 * (1 << 30) - plan.host.peak) // 4
    assert plan.device.cuda_context == 0 and plan.device.nccl == 0
    assert plan.min_gpus is None


def test_sdpa_past_the_sliding_window_gets_a_mask_and_repeated_keys() -> None:
    from fsdpspec.plan.activations import layer_activation_bytes

    mistral = geometry_from_config({"model_type": "mistral", "hidden_size": 64,
                                    "intermediate_size": 128, "num_hidden_layers": 2,
                                    "num_attention_heads": 4, "num_key_value_heads": 2,
                                    "vocab_size": 320, "sliding_window": 8})
    inside = layer_activation_bytes(mistral, 2, 1, 7, "sdpa")
    at_window = layer_activation_bytes(mistral, 2, 1, 8, "sdpa")
    # Same as tiny-llama below the window; at it, a bf16 8×8 mask and k, v grown from
    # 2 to 4 heads of 16 over 8 tokens.
    assert inside == layer_activation_bytes(GEOMETRY, 2, 1, 7, "sdpa")
    assert at_window - layer_activation_bytes(GEOMETRY, 2, 1, 8, "sdpa") == (
        2 * 8 * 8 + 2 * 2 * 8 * (64 - 32))


def test_a_tied_embedding_sums_its_two_gradients_out_of_place() -> None:
    """lm_head's gradient is held from the start of backward; the embedding's arrives at
    the end, and autograd adds the two into a third tensor (all bf16 here)."""
    tied = geometry_from_config(CONFIG | {"tie_word_embeddings": True})
    memory = device_memory(resolve(make_spec(), BASE, geometry=tied))
    point = next(p for p in memory.points if p.name == "backward: embedding")
    assert point.terms["unsharded_gradients"] == 3 * 2 * 320 * 64
    assert point.terms["gathered_parameters"] == 2 * (320 * 64 + 64)  # the tied root
