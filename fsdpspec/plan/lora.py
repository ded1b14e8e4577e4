"""LoRA in the memory model: adapter tensors per unit, the frozen base's storage, and
what the adapters change in the activations (torch-free).

A LoRA freezes the base model: its parameters have no gradient and no optimizer state,
and under FSDP2 they are stored and gathered in the compute dtype (the engine casts them;
FSDP1 flattens a unit into one fp32 tensor, so there they stay fp32). QLoRA stores the
layers' linear weights in 4 bits plus their quantisation state. Each adapted projection
of width in → out gains A (r × in) and B (out × r), trained in fp32 with AdamW: master
weights, gradients and two states, sharded like any parameter. FSDP1 with
use_orig_params allocates a gradient for the whole flat parameter, frozen part included.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from fsdpspec.catalog.families import family
from fsdpspec.job.geometry import Geometry
from fsdpspec.job.job import Job
from fsdpspec.job.lora import (
    NF4_BLOCK,
    NF4_SCALER_BLOCK,
    Adapters,
    adapted_linears,
    quantised_projections,
)
from fsdpspec.job.units import Unit
from fsdpspec.plan import activations as act
from fsdpspec.plan.unit_shards import Sharding
from fsdpspec.semantics import MASTER_BYTES, syncs_gradients

# QLoRA: 4 bits per weight plus one absmax per block of NF4_BLOCK weights, in fp32, or
# (double quantisation) in 8 bits with one fp32 scale per NF4_SCALER_BLOCK blocks.
QLORA_WEIGHT_BYTES = 0.5
QLORA_STATE_BYTES = {False: 4 / NF4_BLOCK,
                     True: 1 / NF4_BLOCK + 4 / (NF4_BLOCK * NF4_SCALER_BLOCK)}


def adapter_sharding(job: Job, sh: Sharding) -> Sharding:
    """The adapters' tensors in the units the base model is split into: each layer's
    with its layer (transformer and size policies: the engine's size units are the
    layers' modules or larger), everything in the root under the `none` policy."""
    a = job.adapters
    assert a is not None
    layer = tuple((s, 1) for s in a.layer_shapes())
    root = tuple((s, 1) for s in a.root_shapes())
    if not sh.units:
        everything = tuple((s, n * a.layers) for s, n in layer) + root
        return Sharding((), Unit("root", everything), sh.shard_size, sh.fsdp_version)
    return Sharding((Unit("layer", layer, a.layers),), Unit("root", root), sh.shard_size,
                    sh.fsdp_version)


def _quantised_numel(g: Geometry) -> int:
    """Weights of one layer that QLoRA stores in 4 bits (`quantised_projections`)."""
    return sum(math.prod(s) for _, s in quantised_projections(g))


def base_bytes_per_element(job: Job) -> float:
    """Bytes a frozen base parameter takes as stored and gathered (QLoRA's layer
    projections excepted): the compute dtype under FSDP2, fp32 under FSDP1."""
    return job.compute_bytes if job.layout.fsdp_version == 2 else MASTER_BYTES


def _base_unit_bytes(job: Job, sh: Sharding, unit: Unit, *, gathered: bool) -> int:
    """One copy of ``unit``'s frozen base, sharded or gathered."""
    numel = sh.gathered_numel(unit) if gathered else sh.shard_numel(unit)
    per = base_bytes_per_element(job)
    a = job.adapters
    assert a is not None
    if a.method != "qlora" or unit is sh.root:
        return int(per * numel)
    # QLoRA: the layer's projections packed in 4 bits plus their block scales.
    layers_in_unit = max(1, unit.numel // max(1, job.geometry.layer_params))
    quantised = _quantised_numel(job.geometry) * layers_in_unit
    packed = quantised * (QLORA_WEIGHT_BYTES + QLORA_STATE_BYTES[a.double_quant])
    share = 1 if gathered else sh.shard_size
    return int(per * max(0, numel - quantised // share) + packed / share)


def frozen_base_bytes(job: Job, sh: Sharding) -> int:
    """Bytes of the frozen base one rank stores."""
    return sum(_base_unit_bytes(job, sh, u, gathered=False) * u.count for u in sh.all_units)


def reference_copy_bytes(job: Job, sh: Sharding) -> int:
    """Bytes one rank stores of a LoRA's DPO reference copy under FSDP2: the frozen base as
    stored, the adapters frozen too, in the compute dtype."""
    adapters = adapter_sharding(job, sh).total_shard_numel()
    return frozen_base_bytes(job, sh) + job.compute_bytes * adapters


def trainable_numel(job: Job) -> int:
    """Elements of every trainable tensor (adapters and modules to save), unsharded."""
    a = job.adapters
    assert a is not None
    return (a.layers * sum(math.prod(s) for s in a.layer_shapes())
            + sum(math.prod(s) for s in a.root_shapes()))


def _gathered(job: Job, sh: Sharding, ash: Sharding, unit: Unit | None,
              adapter: Unit | None) -> int:
    """Bytes of one copy of a unit once gathered: its frozen base as stored, its
    adapters in the compute dtype."""
    base = _base_unit_bytes(job, sh, unit, gathered=True) if unit is not None else 0
    if job.layout.fsdp_version == 1 and base:
        base = base * job.compute_bytes // MASTER_BYTES  # FSDP1 gathers in the param dtype
    return base + (job.compute_bytes * ash.gathered_numel(adapter) if adapter else 0)


def adapted_parts(p: Any, job: Job, sh: Sharding,
                  saved_through: Callable[[int, int], int]) -> Any:
    """memory._Parts for a LoRA: the same moments of a step, with a frozen base (no
    gradient, no optimizer state, stored as `base_bytes_per_element`) and fp32 adapters
    trained with their gradients and optimizer states. ``saved_through(index, layer)``:
    the bytes layers 0..index save when one saves ``layer`` (checkpointing counted)."""

    g, b, r, m = job.geometry, job.compute_bytes, job.reduce_bytes, MASTER_BYTES
    ash = adapter_sharding(job, sh)
    on_device = 0 if job.spec.fsdp.cpu_offload else 1
    adapter_shard = m * ash.total_shard_numel()
    # FSDP1 (use_orig_params) gives the whole flat parameter a gradient, frozen part too.
    grad_shard = adapter_shard + (m * sh.total_shard_numel() if job.layout.fsdp_version == 1 else 0)
    unit, adapter_unit = sh.largest, ash.largest
    layer_trainable = sum(math.prod(s) for s in job.adapters.layer_shapes())
    root_trainable = sum(math.prod(s) for s in job.adapters.root_shapes())
    carried, unsharded_carry = 0, False
    if job.batch.accumulation > 1:
        if syncs_gradients(job.layout.strategy, last_micro_batch=False):
            carried = on_device * grad_shard
        else:
            per = job.reduce_bytes if job.layout.fsdp_version == 2 else m
            carried, unsharded_carry = per * trainable_numel(job), True
    grads = 0 if unsharded_carry else 1
    reduced = 0 if carried and not unsharded_carry else on_device
    gathered_unit = _gathered(job, sh, ash, unit, adapter_unit) if unit else 0
    if not job.layout.reshards_after_forward:
        kept = sum(_gathered(job, sh, ash, u, a) * u.count for u, a in zip(sh.units, ash.units,
                                                                          strict=False))
    else:
        kept = gathered_unit if job.layout.fsdp_version == 2 else 0
    sharded_unit = ash.shard_numel(adapter_unit) if adapter_unit else 0
    if job.layout.fsdp_version == 1 and unit:
        sharded_unit += sh.shard_numel(unit)
    layer, first_layer_saving = adapted_layer_activations(job)
    saved = saved_through(g.num_layers - 1, layer) - first_layer_saving
    return dataclasses.replace(
        p,
        persistent={"sharded_parameters": on_device * (frozen_base_bytes(job, sh) + adapter_shard),
                    "optimizer_states": on_device * job.optimizer_states * adapter_shard},
        accumulated=carried,
        root=_gathered(job, sh, ash, sh.root, ash.root),
        units_kept=kept,
        unit=gathered_unit,
        prefetch=gathered_unit if p.prefetch else 0,
        unit_grads=grads * b * layer_trainable,
        head_grads=grads * b * root_trainable,
        head_held=grads * b * root_trainable,
        unit_reduce=r * (ash.gathered_numel(adapter_unit) if adapter_unit else 0),
        sharded_unit_grads=reduced * m * sharded_unit,
        sharded_layer_grads=reduced * m * sharded_unit * (unit.count if unit else 0),
        root_grads=grads * b * root_trainable,
        root_reduce=r * ash.gathered_numel(ash.root),
        saved=saved,
        layer=layer,
        sharded_grads=on_device * grad_shard,
        optimizer_temporaries=on_device * (adapter_shard if job.optimizer_states == 2 else 0),
    )


def adapted_layer_activations(job: Job) -> tuple[int, int]:
    """(bytes one layer saves without checkpointing, bytes the model saves less outside
    that count) with LoRA. A frozen projection keeps no input for a weight gradient,
    and a frozen norm weight no normalised value; each adapter keeps its A output (T·r)
    for B's gradient and, with dropout, its dropped-out input and mask (a bool on a GPU).
    The first layer's input needs no gradient (the embeddings are frozen), so its first
    norm saves only what an adapter reads; a frozen lm_head keeps neither the final
    norm's normalised value nor its output."""
    a, g, b, t = job.adapters, job.geometry, job.compute_bytes, job.batch.tokens
    assert a is not None
    full = act.layer_activation_bytes(g, b, job.batch.sequences, job.batch.local_seq,
                                      job.attention)
    norm_value = 0 if g.norm_bias else (4 if g.fp32_norm else b)
    # A norm trained in full (modules_to_save) keeps its normalised value for its weight.
    trained = a.trained_norms((*g.norm_names, "q_norm", "k_norm"))
    qk_frozen = (g.q_width * ("q_norm" not in trained) + g.kv_width * ("k_norm" not in trained)
                 if g.qk_norm else 0)
    frozen_norms = norm_value * t * (
        len(set(g.norm_names) - trained) * g.hidden_size + qk_frozen)
    layer = full + b * t * a.r * len(a.linears) - _unsaved_inputs(g, b, t, a) - frozen_norms
    if g.experts:
        # Frozen experts and router: no gathered rows nor gated products kept for the
        # expert weights' gradients, no router input for the router's.
        rows = t * g.experts.active
        layer -= b * rows * (g.hidden_size + g.experts.width) + b * t * g.hidden_size
    if a.dropout:
        layer += sum((b + 1) * t * shape[1] for _, shape in a.linears)
    if g.norm_names[0] == "input_layernorm":
        first_norm = act.norm_bytes(g, b, t * g.hidden_size) - norm_value * t * g.hidden_size
        first_norm -= b * t * g.hidden_size  # its output, which the adapters read
    else:  # post-norm (OLMo 2): the first layer's projections read its input directly
        first_norm = 0
    final_norm = 0 if a.saves_root(_renamed_path(g, "model.norm")) else norm_value
    head = 0 if a.head or a.saves_head else (final_norm + b) * t * g.hidden_size
    return layer, first_norm + head


def _renamed_path(g: Geometry, planned: str) -> str:
    """A module's path as the model names it (GPT-NeoX's final norm is
    gpt_neox.final_layer_norm)."""
    fam = family(g.family)
    return fam.module_names.get(planned, planned) if fam else planned


def _unsaved_inputs(g: Geometry, b: int, t: int, a: Adapters) -> int:
    """Inputs a full fine-tune's projections save for their weight gradients that no one
    keeps once they are frozen: an input read by no adapted projection (with dropout,
    the adapters keep their own dropped-out copies, so no input is kept for them) nor
    by a projection trained in full (modules_to_save: its weight gradient reads it)."""
    adapted = {name for name, _ in a.linears} if not a.dropout else set()
    adapted |= {name for name, _ in adapted_linears(g, a.matched, saved=True)}
    groups = (({"q_proj", "k_proj", "v_proj", "qkv_proj"}, g.hidden_size),
              ({"gate_proj", "up_proj", "gate_up_proj"}, g.hidden_size),
              ({"down_proj"}, g.intermediate_size))
    if g.experts:
        groups = groups[:1]
    if g.mlp == "plain":
        groups = (groups[0], ({"up_proj"}, g.hidden_size), groups[2])
    return sum(b * t * width for names, width in groups if not names & adapted)


def adapted_host_terms(job: Job, sh: Sharding, parameters: int, ranks: int,
                       file_bytes: int) -> dict[str, int]:
    """Host terms that differ under LoRA: offloaded state is the frozen base plus the
    adapters' parameters, gradients and optimizer states; a full state dict gathers the
    trainable tensors only; the export writes the adapters, or merges them into the
    whole base model built in fp32 (plus its weight files while they are read)."""
    trainable = trainable_numel(job)
    adapter_shard = MASTER_BYTES * adapter_sharding(job, sh).total_shard_numel()
    offloaded = ranks * (frozen_base_bytes(job, sh) + adapter_shard * (2 + job.optimizer_states))
    fsdp, loads = job.spec.fsdp, job.spec.model.weights is not None
    export = MASTER_BYTES * trainable
    if job.adapters is not None and job.adapters.merged and job.export_bytes:
        export += MASTER_BYTES * parameters + (file_bytes * parameters if loads else 0)
        export += min(parameters * job.export_bytes, job.export_shard_bytes)
    return {
        "offloaded_states": offloaded if fsdp.cpu_offload else 0,
        "full_state_dict_gather": (MASTER_BYTES * trainable * (1 + job.optimizer_states)
                                   if fsdp.state_dict_type == "FULL_STATE_DICT" else 0),
        "final_export": export if job.export_bytes else 0,
    }
