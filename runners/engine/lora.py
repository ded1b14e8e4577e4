"""LoRA adapters, added with the ``peft`` library before FSDP sees the model.

The model is built on the meta device, the adapters are injected there
(``peft.inject_adapter_in_model``: only adapters and ``modules_to_save`` stay trainable),
and then the engine checkpoints, shards and materialises it as any model. Under FSDP2 the
frozen base is stored in the compute dtype: it has no gradient and no optimizer state, so
an fp32 master copy would only cost memory (FSDP1 flattens a unit into one tensor of one
dtype, so there the base stays fp32 beside the adapters).

The engine's model keeps transformers' own class at the root; peft's state-dict names
(``q_proj.base_layer.weight``, ``q_proj.lora_A.default.weight``,
``lm_head.modules_to_save.default.weight``) are mapped to the base model's names when
weights are loaded, and to peft's file format when an adapter is exported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fsdpspec.job.job import Job
from fsdpspec.job.lora import (
    ALL_LINEAR,
    NF4_BLOCK,
    NF4_SCALER_BLOCK,
    quantised_projections,
    regex_targets,
)
from fsdpspec_runners.engine.errors import EngineError, first_line

ADAPTER = "default"  # peft's adapter name; the engine trains one adapter
# Parts of peft's parameter names that the base model's names do not have.
_WRAPPERS = re.compile(rf"\.(base_layer|original_module|modules_to_save\.{ADAPTER})(?=\.)")


def lora_config(job: Job) -> Any:
    """The ``peft.LoraConfig`` of the job's `peft` section."""
    from peft import LoraConfig

    spec, targets = job.spec, job.lora_targets
    assert spec.peft is not None
    parameters = spec.peft.target_parameters
    if not targets and not parameters:
        raise EngineError("peft.target_modules: the model's family has no default targets; "
                          "list the modules to adapt")
    # peft expands its all-linear shorthand only when it is the whole (string) value, and
    # full-matches a string as a regular expression.
    modules = targets[0] if targets == (ALL_LINEAR,) or regex_targets(spec) else (
        list(targets) or None)
    return LoraConfig(
        r=spec.peft.r, lora_alpha=spec.peft.alpha, lora_dropout=spec.peft.dropout,
        target_modules=modules, target_parameters=list(parameters) or None,
        modules_to_save=spec.peft.modules_to_save or None, task_type="CAUSAL_LM",
    )


def add_adapters(model: nn.Module, job: Job) -> nn.Module:
    """Inject the adapters into a meta model (in place) and freeze everything else; under
    FSDP2 the frozen parameters take the compute dtype."""
    from peft import inject_adapter_in_model

    spec = job.spec
    try:
        inject_adapter_in_model(lora_config(job), model)
    except ValueError as exc:  # e.g. a target module the model does not have
        raise EngineError(f"peft: {first_line(exc)}") from None
    frozen_in_compute_dtype(model, job)
    if spec.peft is not None and spec.peft.method == "qlora":
        _quantise_base(model, job)
    return model


def frozen_in_compute_dtype(model: nn.Module, job: Job) -> None:
    """Under FSDP2, store a meta model's frozen parameters in the compute dtype (a LoRA's
    base, DPO's reference copy): without gradients or optimizer state an fp32 master
    copy would only cost memory, and FSDP2 gathers them in the compute dtype anyway."""
    dtype = getattr(torch, job.spec.fsdp.mixed_precision.param_dtype)
    if job.layout.fsdp_version == 2 and dtype != torch.float32:
        for param in model.parameters():  # each tied parameter once: ties survive
            if not param.requires_grad:
                param.data = param.data.to(dtype)


def _quantise_base(model: nn.Module, job: Job) -> None:
    """QLoRA: each decoder layer's frozen Linear weights (`quantised_projections`) become
    torchao NF4 tensors, still on the meta device, so that ``fully_shard`` shards their
    packed bytes and all-gathers them through NF4Tensor's ``fsdp_pre_all_gather`` (FSDP1
    cannot, FS312). The values are set later by `quantised_shard`."""
    from torchao.quantization import to_nf4

    names = {name for name, _ in quantised_projections(job.geometry)}
    for path, module in model.named_modules():
        # peft's adapted projection holds the Linear as ``<name>.base_layer``.
        name = base_key(f"{path}.weight").rsplit(".", 2)[-2]
        if (isinstance(module, nn.Linear) and ".layers." in f".{path}" and name in names
                and not module.weight.requires_grad):
            module.weight = nn.Parameter(to_nf4(module.weight, NF4_BLOCK, NF4_SCALER_BLOCK),
                                         requires_grad=False)


def is_quantised(tensor: torch.Tensor) -> bool:
    """A parameter sharded into NF4 (without importing torchao for every model)."""
    return type(getattr(tensor, "_local_tensor", tensor)).__name__ == "NF4Tensor"


def quantised_shard(target: torch.Tensor, full: torch.Tensor) -> nn.Parameter:
    """This rank's parameter for the NF4 ``target`` with the values ``full``: quantised
    whole, then cut into this rank's rows. Whole, because NF4 keeps one scaler mean per
    tensor and each rank dequantises the all-gathered blocks with its own copy; the
    parameter is replaced (NF4Tensor cannot be filled in place from a dense shard) and
    FSDP2 picks the new one up at its lazy initialisation."""
    from torch.distributed.tensor import DTensor
    from torchao.quantization import to_nf4

    assert isinstance(target, DTensor)
    mesh, local = target.device_mesh, target._local_tensor
    whole = to_nf4(full.to(device=local.device, dtype=target.dtype), NF4_BLOCK,
                   NF4_SCALER_BLOCK)
    rows = torch.chunk(whole, mesh.size(), dim=0)[mesh.get_local_rank()]
    shard = DTensor.from_local(rows, mesh, target.placements, run_check=False,
                               shape=target.shape, stride=target.stride())
    return nn.Parameter(shard, requires_grad=False)


def adapter_inits(model: nn.Module,
                  generator: torch.Generator) -> dict[int, Callable[[nn.Module], None]]:
    """peft's initialisation of each adapter module (by id): A as nn.Linear's default
    (Kaiming uniform, drawn from ``generator``, not the base model's stream), B zero, so
    the adapted model starts as the base model."""
    inits: dict[int, Callable[[nn.Module], None]] = {}
    for name, module in model.named_modules():
        if name.endswith(f".lora_A.{ADAPTER}"):
            inits[id(module)] = lambda m: nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5),
                                                                   generator=generator)
        elif name.endswith(f".lora_B.{ADAPTER}"):
            inits[id(module)] = lambda m: nn.init.zeros_(m.weight)
    return inits


def base_module_of(name: str) -> str | None:
    """The module a `modules_to_save` copy starts as (its wrapper's original module);
    None for any other module."""
    copy = f".modules_to_save.{ADAPTER}."
    if copy not in f"{name}.":
        return None
    return f"{name}.".replace(copy, ".original_module.", 1)[:-1]


def base_key(key: str) -> str:
    """The base model's name of a parameter of the adapted model (an adapter's own
    parameter keeps its name: the base weights do not have it)."""
    return _WRAPPERS.sub("", key)


def is_adapter_key(key: str) -> bool:
    return ".lora_A." in key or ".lora_B." in key


def base_state_dict(model: nn.Module, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``weights`` (the base model's files) under the adapted model's names; a module
    in `modules_to_save` starts as a copy of the base module, as peft makes it."""
    names = [k for k in model.state_dict() if not is_adapter_key(k)]
    renamed = {k: weights[base_key(k)] for k in names if base_key(k) in weights}
    foreign = set(weights) - {base_key(k) for k in names}
    return renamed | {k: weights[k] for k in foreign}  # unexpected keys stay reported


def peft_file_key(key: str) -> str:
    """A trainable parameter's name in peft's ``adapter_model.safetensors``."""
    key = key.replace(f".{ADAPTER}.", ".").replace(".modules_to_save.", ".")
    return f"base_model.model.{key}"
