"""Activation checkpointing, then FSDP: ``fully_shard`` (FSDP2) or FSDP1.

Order follows torchtitan: checkpointing wraps each layer first, and the (wrapped) layers
become the FSDP units.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    CheckpointWrapper,
    checkpoint_wrapper,
)
from torch.distributed.device_mesh import DeviceMesh

from fsdpspec.catalog.modelconfig import layer_classes
from fsdpspec.semantics import (
    DTYPE_BYTES,
    HYBRID_STRATEGIES,
    fsdp1_option,
    is_checkpointed,
    reshards_after_forward,
)
from fsdpspec.spec.v1 import Fsdp, JobSpec, MixedPrecision
from fsdpspec_runners.engine.errors import EngineError
from fsdpspec_runners.engine.model import model_geometry

DTYPES = {name: getattr(torch, name) for name in DTYPE_BYTES}


def parallelize(model: nn.Module, spec: JobSpec, mesh: DeviceMesh,
                device: torch.device) -> tuple[nn.Module, int]:
    """torchtitan's order: activation checkpointing, then compile, then FSDP2 (each unit,
    then the root) or FSDP1. Returns the wrapped model and its number of units besides
    the root."""
    layers = find_layers(model, spec, model_geometry(spec))
    layers = apply_activation_checkpointing(model, layers, spec.fsdp)
    if spec.train.compile:
        compile_layers(layers)
    units = choose_units(model, layers, spec.fsdp)
    if spec.fsdp.version == 2:
        return shard_fsdp2(model, units, spec.fsdp, mesh, device), len(units)
    return wrap_fsdp1(model, units, spec.fsdp, mesh, device), len(units)


def find_layers(model: nn.Module, spec: JobSpec, config: dict[str, Any] | None) -> list[nn.Module]:
    """The transformer layers: the spec's classes, else the family's decoder layer, else
    the blocks a transformers model of another family declares unsplittable."""
    names = set(layer_classes(spec.fsdp.transformer_layer_cls, config)
                or getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if names and not layers:
        raise EngineError(f"fsdp.transformer_layer_cls: the model has no {sorted(names)} module")
    return layers


def apply_activation_checkpointing(
    model: nn.Module, layers: list[nn.Module], fsdp: Fsdp
) -> list[nn.Module]:
    """Wrap every layer (full, op) or one in ``ac_every`` (selective); return the new layers."""
    if fsdp.activation_checkpointing == "none":
        return layers
    context = {"context_fn": op_selective_contexts} if fsdp.activation_checkpointing == "op" else {}
    parents = {
        id(child): (parent, name)
        for parent in model.modules()
        for name, child in parent.named_children()
    }
    wrapped = []
    for index, layer in enumerate(layers):
        if is_checkpointed(fsdp.activation_checkpointing, fsdp.ac_every, index):
            parent, name = parents[id(layer)]
            layer = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT,
                                       **context)
            setattr(parent, name, layer)
        wrapped.append(layer)
    return wrapped


def _op_save_list() -> set[Any]:
    """torchtitan's op-level save list (``_save_list``): matrix multiplies, the fused
    attention kernels and the reduce-scatter a tensor-parallel layer issues, and ``max``
    (a float8 scale). The CPU's fused attention is added so that CPU runs and the
    fake-tensor trace save what a GPU saves."""
    aten = torch.ops.aten
    return {aten.mm.default, aten.max.default,
            aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_cudnn_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default}


def op_selective_contexts() -> Any:
    """One layer call's checkpoint contexts under torchtitan's op-level policy: save the
    output of every op in the save list except every second ``mm`` (counted apart in
    forward and in recomputation, so both make the same choices); recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save, mm, counts = _op_save_list(), torch.ops.aten.mm.default, defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == mm:
            counts[mode] += 1
        if func in save and not (func == mm and counts[mode] % 2 == 0):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def size_units(
    model: nn.Module, min_num_params: int, *, whole_checkpointed: bool = False
) -> list[nn.Module]:
    """FSDP1's size policy, bottom-up: a module whose not-yet-wrapped parameters reach
    ``min_num_params`` becomes a unit (the root is always one). Containers are never
    units: a ModuleList or ModuleDict is not called, so it could never gather. Nor is a
    module holding a tied parameter (an input embedding shared with ``lm_head``), or
    one above it: FSDP needs every holder of a shared parameter in one unit, and the
    holders meet only at the root. With ``whole_checkpointed`` nothing inside a
    checkpointed layer becomes a unit (FSDP1 cannot map optimizer state to names through
    a checkpoint wrapper with units inside it, so such a run could never resume)."""
    units: list[nn.Module] = []
    tied = _tied_holders(model)

    def visit(module: nn.Module) -> tuple[int, bool]:
        if whole_checkpointed and isinstance(module, CheckpointWrapper):
            count = sum(p.numel() for p in module.parameters())
            holds_tied = any(id(m) in tied for m in module.modules())
        else:
            below = [visit(child) for child in module.children()]
            count = sum(n for n, _ in below)
            count += sum(p.numel() for p in module.parameters(recurse=False))
            holds_tied = id(module) in tied or any(flag for _, flag in below)
        container = isinstance(module, (nn.ModuleList, nn.ModuleDict))
        if count >= min_num_params and module is not model and not container and not holds_tied:
            units.append(module)
            return 0, False
        return count, holds_tied

    visit(model)
    return units


def _tied_holders(model: nn.Module) -> set[int]:
    """ids of the modules holding a parameter that another module holds too."""
    holders: dict[int, list[int]] = {}
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None:
                holders.setdefault(id(param), []).append(id(module))
    return {m for found in holders.values() if len(found) > 1 for m in found}


def choose_units(model: nn.Module, layers: list[nn.Module], fsdp: Fsdp) -> list[nn.Module]:
    """The modules that become FSDP units besides the root."""
    if fsdp.auto_wrap_policy == "transformer":
        return layers
    if fsdp.auto_wrap_policy == "size":
        return size_units(model, fsdp.min_num_params, whole_checkpointed=fsdp.version == 1)
    return []


def shard_fsdp2(
    model: nn.Module, units: list[nn.Module], fsdp: Fsdp, mesh: DeviceMesh, device: torch.device
) -> nn.Module:
    """``fully_shard`` each unit, then the root."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    offload = (
        CPUOffloadPolicy(pin_memory=device.type == "cuda") if fsdp.cpu_offload else OffloadPolicy()
    )
    options = dict(
        mesh=mesh, mp_policy=_fsdp2_precision(fsdp.mixed_precision), offload_policy=offload
    )
    reshard = reshards_after_forward(fsdp.sharding_strategy)
    for index, unit in enumerate(units):
        # The last unit's parameters are needed again at once by backward: keep them.
        fully_shard(unit, reshard_after_forward=reshard and index < len(units) - 1, **options)
    # The root (embeddings, final norm, lm_head) is needed again at once by backward, which
    # starts at lm_head: keep it gathered, as FSDP2 does for a root left unset and
    # torchtitan does, instead of all-gathering it again after the loss.
    fully_shard(model, reshard_after_forward=False, **options)
    return model


def _fsdp2_precision(precision: MixedPrecision) -> Any:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(
        param_dtype=DTYPES[precision.param_dtype], reduce_dtype=DTYPES[precision.reduce_dtype]
    )


def wrap_fsdp1(
    model: nn.Module, units: list[nn.Module], fsdp: Fsdp, mesh: DeviceMesh, device: torch.device
) -> nn.Module:
    """``FullyShardedDataParallel`` with the spec's policy and every FSDP1 option."""
    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

    unit_ids = {id(u) for u in units}
    prefetch = (
        None if fsdp.backward_prefetch == "NONE" else BackwardPrefetch[fsdp.backward_prefetch]
    )
    strategy, hybrid_mesh = _fsdp1_layout(fsdp.sharding_strategy, mesh)
    on_meta = any(p.is_meta for p in model.parameters())
    return FSDP(
        model,
        auto_wrap_policy=functools.partial(
            lambda_auto_wrap_policy, lambda_fn=lambda m: id(m) in unit_ids
        ),
        sharding_strategy=_fsdp1_strategy(strategy),
        mixed_precision=_fsdp1_precision(fsdp.mixed_precision),
        cpu_offload=CPUOffload(offload_params=fsdp.cpu_offload),
        backward_prefetch=prefetch,
        forward_prefetch=fsdp.forward_prefetch,
        limit_all_gathers=fsdp1_option(fsdp, "limit_all_gathers"),
        use_orig_params=fsdp1_option(fsdp, "use_orig_params"),
        sync_module_states=fsdp1_syncs_states(fsdp, device),
        param_init_fn=(lambda m: m.to_empty(device=device, recurse=False)) if on_meta else None,
        device_id=device,
        device_mesh=hybrid_mesh,
    )


def _fsdp1_layout(strategy: str, mesh: DeviceMesh) -> tuple[str, DeviceMesh | None]:
    """The FSDP1 strategy and the 2-D (replicate, shard) mesh it takes, if hybrid.
    Shard groups of one rank are NO_SHARD over every rank: given them, FSDP1 switches
    each group to NO_SHARD and never reduces gradients across the replicas, which then
    train apart."""
    if strategy not in HYBRID_STRATEGIES:
        return strategy, None
    if mesh.size(1) == 1:
        return "NO_SHARD", None
    return strategy, mesh


def _fsdp1_strategy(name: str) -> Any:
    """FSDP1's enum member; torch spells HYBRID_SHARD_ZERO2 with a leading underscore."""
    from torch.distributed.fsdp import ShardingStrategy

    members = ShardingStrategy.__members__
    return members[name] if name in members else members[f"_{name}"]


def fsdp1_syncs_states(fsdp: Fsdp, device: torch.device) -> bool:
    """FSDP1 broadcasts rank 0's states only from GPU memory; on the CPU every rank builds
    the same seeded model instead, so there is nothing to synchronise."""
    return fsdp.sync_module_states and device.type == "cuda"


def _fsdp1_precision(precision: MixedPrecision) -> Any:
    from torch.distributed.fsdp import MixedPrecision as Fsdp1MixedPrecision

    return Fsdp1MixedPrecision(
        param_dtype=DTYPES[precision.param_dtype],
        reduce_dtype=DTYPES[precision.reduce_dtype],
        buffer_dtype=DTYPES[precision.buffer_dtype],
    )


def compile_layers(layers: list[nn.Module]) -> None:
    """``torch.compile`` each layer in place (before sharding, as torchtitan does)."""
    for layer in layers:
        layer.compile()
