"""float8 conversion, tensor parallelism, activation checkpointing, then FSDP:
``fully_shard`` (FSDP2) or FSDP1, or DDP where nothing is sharded
(`fsdpspec.job.layout.runs_as_ddp`).

Order follows torchtitan: float8 swaps the Linear modules first, the layers are split
over the tensor-parallel ranks, checkpointing wraps each layer, and the (wrapped) layers
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
    checkpoint_wrapper,
)
from torch.distributed.device_mesh import DeviceMesh

from fsdpspec.job.experts import expert_shard_dim
from fsdpspec.job.introspect import module_tree
from fsdpspec.job.job import Job, wrap_of
from fsdpspec.job.units import Units, choose_units
from fsdpspec.semantics import DTYPE_BYTES, fsdp1_option
from fsdpspec.spec.v1 import MixedPrecision
from fsdpspec_runners.engine.errors import EngineError
from fsdpspec_runners.engine.expert_parallel import apply_expert_parallel, expert_parallel_plan
from fsdpspec_runners.engine.float8 import convert_float8
from fsdpspec_runners.engine.mesh import ExpertMeshes
from fsdpspec_runners.engine.tensor_parallel import apply_tensor_parallel, tensor_parallel_plan

DTYPES = {name: getattr(torch, name) for name in DTYPE_BYTES}


def parallelize(model: nn.Module, job: Job, mesh: DeviceMesh, device: torch.device, *,
                tp_mesh: DeviceMesh | None = None,
                expert_meshes: ExpertMeshes | None = None) -> tuple[nn.Module, Units]:
    """torchtitan's order: float8 conversion, tensor parallelism over ``tp_mesh`` (the
    ``tp`` sub-mesh, where the job has that degree), expert parallelism over
    ``expert_meshes`` (where it has that one), activation checkpointing, then compile,
    then FSDP2 (each unit, then the root) or FSDP1. The units and the checkpointed
    layers are the job's, by module name; ``mesh`` is the sub-mesh FSDP runs over
    (`mesh.fsdp_mesh`). Returns the wrapped model and its units besides the root (none
    under DDP)."""
    spec = job.spec
    if job.float8 is not None:
        convert_float8(model, job)
    if job.layout.dims.tp_enabled:
        assert tp_mesh is not None, "a tensor-parallel job needs its tp sub-mesh"
        apply_tensor_parallel(model, tensor_parallel_plan(job), tp_mesh)
    units_of = model_units(model, job)
    if job.layout.dims.ep_enabled:
        assert expert_meshes is not None, "an expert-parallel job needs its sparse mesh"
        apply_expert_parallel(model, expert_parallel_plan(model, list(units_of.expert_names())),
                              expert_meshes.ep, expert_meshes.tokens)
    # Taken before checkpointing renames the modules (the parameters stay the same).
    experts = expert_parameters(model, units_of)
    expert_modules = [model.get_submodule(name) for name in units_of.expert_names()]
    layers = [model.get_submodule(name) for name in units_of.layer_names()]
    units = [model.get_submodule(name) for name in units_of.names()]
    checkpointed = {id(model.get_submodule(name)) for name in units_of.checkpointed()}
    wrapped = apply_activation_checkpointing(model, checkpointed, units_of.ac_mode)
    layers = [wrapped.get(id(m), m) for m in layers]
    units = [wrapped.get(id(m), m) for m in units]
    if spec.train.compile:
        compile_layers(layers)
    if job.layout.ddp:
        return replicate_ddp(model, mesh, device), units_of
    if job.layout.fsdp_version == 2:
        if expert_meshes is not None:
            shard_experts(expert_modules, job, expert_meshes.fsdp, device, experts)
        return shard_fsdp2(model, units, job, mesh, device, experts), units_of
    return wrap_fsdp1(model, units, job, mesh, device), units_of


def model_units(model: nn.Module, job: Job) -> Units:
    """The job's units: by the names its geometry gives for a model transformers builds;
    for a factory model, the same policy over the built module's own tree. A name the
    model lacks is an EngineError (the plan would not describe this model)."""
    if job.builds_transformers_model and job.units is not None:
        units = job.units
        for name in (*units.names(), *units.layer_names()):
            try:
                model.get_submodule(name)
            except AttributeError:
                raise EngineError(f"the planned FSDP unit {name!r} is not a module of "
                                  f"{type(model).__name__}") from None
        return units
    classes = list(job.spec.fsdp.transformer_layer_cls) or sorted(
        getattr(model, "_no_split_modules", None) or ())
    units = choose_units(module_tree(model), wrap_of(job.spec, classes))
    if classes and not units.layers:
        raise EngineError(f"fsdp.transformer_layer_cls: the model has no {classes} module")
    return units


def expert_parameters(model: nn.Module, units: Units) -> set[nn.Parameter]:
    """The stacked expert tensors: the own parameters of the job's experts modules
    (`fsdpspec.job.experts`)."""
    return {p for name in units.expert_names()
            for p in model.get_submodule(name).parameters(recurse=False)}


def expert_placement(experts: set[nn.Parameter], shard_degree: int) -> Any:
    """FSDP2's ``shard_placement_fn``: a stacked expert tensor on the dim
    `expert_shard_dim` picks for the experts this rank holds (all of them, or under
    expert parallelism its own: torchtitan's Shard(1) once the degree exceeds them),
    every other parameter on FSDP's default, dim 0."""
    from torch.distributed.tensor import DTensor, Shard

    def placement(param: nn.Parameter) -> Shard | None:
        if param not in experts:
            return None
        local = param.to_local() if isinstance(param, DTensor) else param
        return Shard(expert_shard_dim(tuple(local.shape), shard_degree))

    return placement


def apply_activation_checkpointing(model: nn.Module, layers: set[int],
                                   mode: str) -> dict[int, nn.Module]:
    """Wrap the modules whose ids are in ``layers`` in activation checkpointing (under
    ``mode`` op, torchtitan's op-level policy), in place; return each one's wrapper by
    the id of the module it wraps."""
    wrapped: dict[int, nn.Module] = {}
    if not layers:
        return wrapped
    context = {"context_fn": op_selective_contexts} if mode == "op" else {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in layers and id(child) not in wrapped:
                wrapper = checkpoint_wrapper(child, checkpoint_impl=CheckpointImpl.NO_REENTRANT,
                                             **context)
                setattr(parent, name, wrapper)
                wrapped[id(child)] = wrapper
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


# DDP's default bucket size, as accelerate and the HF Trainer leave it.
DDP_BUCKET_MB = 25


def replicate_ddp(model: nn.Module, mesh: DeviceMesh, device: torch.device) -> nn.Module:
    """DDP over the mesh's replicas (`fsdpspec.job.layout.runs_as_ddp`), in place: the
    module keeps its names (the checkpoint's keys do not change) and its type. Gradients
    are views of DDP's buckets, so they take no memory beyond the buckets (the plan's
    `gradient buckets`)."""
    from torch.distributed._composable.replicate import replicate

    # The replicas' process group, not a sliced mesh: replicate() takes that for DDP
    # beside tensor parallelism and converts DTensors around every forward.
    return replicate(model, process_group=mesh.get_group("dp_replicate"), device_id=device,
                     bucket_cap_mb=DDP_BUCKET_MB, gradient_as_bucket_view=True)


def shard_fsdp2(
    model: nn.Module, units: list[nn.Module], job: Job, mesh: DeviceMesh, device: torch.device,
    experts: set[nn.Parameter],
) -> nn.Module:
    """``fully_shard`` each unit, then the root; the stacked ``experts`` where
    `expert_placement` puts them."""
    from torch.distributed.fsdp import fully_shard

    placement = expert_placement(experts, job.layout.shard_size) if experts else None
    options = dict(mesh=mesh, **_fsdp2_options(job, device, placement))
    reshard = job.layout.reshards_after_forward
    for index, unit in enumerate(units):
        # The last unit's parameters are needed again at once by backward: keep them.
        fully_shard(unit, reshard_after_forward=reshard and index < len(units) - 1, **options)
    # The root (embeddings, final norm, lm_head) is needed again at once by backward, which
    # starts at lm_head: keep it gathered, as FSDP2 does for a root left unset and
    # torchtitan does, instead of all-gathering it again after the loss.
    fully_shard(model, reshard_after_forward=False, **options)
    return model


def shard_experts(modules: list[nn.Module], job: Job, mesh: DeviceMesh, device: torch.device,
                  experts: set[nn.Parameter]) -> None:
    """Under expert parallelism, ``fully_shard`` each experts module over the experts'
    own data-parallel sub-mesh (``efsdp``, `mesh.expert_meshes`), before its layer takes
    the rest over the dense one.

    An expert's gradient sums the tokens of every rank that routed to it: the ``ep``
    ranks' batches through the all-to-all's backward, and the ``efsdp`` (and replica)
    copies' through FSDP's reduction. That is all the data-parallel batches, so it is
    divided by their number, as the dense gradients are, not by the sub-mesh's size.
    FSDP2 would divide by another factor in the reduce-scatter (PREMUL_SUM, which gloo
    rejects and NCCL zeroes in bf16 up to torch 2.13): it sums there and divides
    locally, as transformers' ``distributed/fsdp.py`` does. Without a reduce-scatter
    (``efsdp`` 1) FSDP2 divides locally by itself, and a forced sum would divide twice."""
    from torch.distributed.fsdp import fully_shard

    dims = job.layout.dims
    options = _fsdp2_options(job, device, expert_placement(experts, dims.efsdp))
    for module in modules:
        fully_shard(module, mesh=mesh, reshard_after_forward=job.layout.reshards_after_forward,
                    **options)
        module.set_gradient_divide_factor(float(dims.dp_replicate * dims.fsdp_shard))
        module.set_force_sum_reduction_for_comms(dims.efsdp > 1)


def _fsdp2_options(job: Job, device: torch.device, placement: Any) -> dict[str, Any]:
    """``fully_shard``'s precision, offload and ``shard_placement_fn`` of the job."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

    fsdp = job.spec.fsdp
    offload = (
        CPUOffloadPolicy(pin_memory=device.type == "cuda") if fsdp.cpu_offload else OffloadPolicy()
    )
    return dict(mp_policy=_fsdp2_precision(fsdp.mixed_precision), offload_policy=offload,
                shard_placement_fn=placement)


def _fsdp2_precision(precision: MixedPrecision) -> Any:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(
        param_dtype=DTYPES[precision.param_dtype], reduce_dtype=DTYPES[precision.reduce_dtype]
    )


def wrap_fsdp1(
    model: nn.Module, units: list[nn.Module], job: Job, mesh: DeviceMesh, device: torch.device
) -> nn.Module:
    """``FullyShardedDataParallel`` with the spec's policy and every FSDP1 option."""
    fsdp = job.spec.fsdp
    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

    unit_ids = {id(u) for u in units}
    prefetch = (
        None if fsdp.backward_prefetch == "NONE" else BackwardPrefetch[fsdp.backward_prefetch]
    )
    # A hybrid layout of one-rank groups runs as NO_SHARD (`fsdpspec.job.layout`).
    strategy = job.layout.strategy
    hybrid_mesh = mesh if job.layout.hybrid else None
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
        sync_module_states=fsdp1_syncs_states(fsdp.sync_module_states, device),
        param_init_fn=(lambda m: m.to_empty(device=device, recurse=False)) if on_meta else None,
        device_id=device,
        device_mesh=hybrid_mesh,
    )


def _fsdp1_strategy(name: str) -> Any:
    """FSDP1's enum member; torch spells HYBRID_SHARD_ZERO2 with a leading underscore."""
    from torch.distributed.fsdp import ShardingStrategy

    members = ShardingStrategy.__members__
    return members[name] if name in members else members[f"_{name}"]


def fsdp1_syncs_states(sync_module_states: bool, device: torch.device) -> bool:
    """FSDP1 broadcasts rank 0's states only from GPU memory; on the CPU every rank builds
    the same seeded model instead, so there is nothing to synchronise."""
    return sync_module_states and device.type == "cuda"


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
