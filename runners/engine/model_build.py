"""Build the model from the resolved job and materialise it.

Transformers models are built from the config dict the planner read (``Job.config``),
on the meta device, so nothing is allocated before sharding. Nothing is ever
downloaded: configs and weights are local.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from fsdpspec.job.job import Job
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.engine.dist import Runtime, fail_together
from fsdpspec_runners.engine.errors import EngineError, first_line
from fsdpspec_runners.engine.lora import is_quantised, quantised_shard

# Module names that activation checkpointing and torch.compile insert into parameter names.
_WRAPPER_PARTS = r"(_checkpoint_wrapped_module|_orig_mod)\."


def build_model(job: Job, *, on_meta: bool, attention: str | None = None) -> nn.Module:
    """A fresh model, with the job's LoRA adapters when it has a `peft` section: on the
    meta device (no storage yet; see ``materialise``), or materialised whole on the CPU
    and initialised from the spec's seed; ``attention`` instead of the spec's
    implementation."""
    spec = job.spec
    with torch.device("meta"):
        if spec.model.factory is not None:
            model = _call_factory(spec.model.factory)
        else:
            model = _build_transformers_model(job, attention or job.attention)
    if spec.peft is not None:
        from fsdpspec_runners.engine.lora import add_adapters

        model = add_adapters(model, job)
    if not on_meta:
        materialise(model, torch.device("cpu"), spec.train.seed)
    return model


def _build_transformers_model(job: Job, attention: str) -> nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = job.spec
    assert job.config is not None  # a preset or an hf_config
    config = AutoConfig.for_model(**job.config)
    # Training never reads a key/value cache; building one costs memory, and under
    # activation checkpointing the recomputed forward appends to it a second time.
    config.use_cache = False
    # A Mixture-of-Experts model returns its load-balancing loss only when asked for the
    # router logits; the loop adds it to the loss it optimises.
    options: dict[str, Any] = {}
    if hasattr(config, "output_router_logits"):
        config.output_router_logits = True
        # transformers' grouped expert matmul takes bf16 only on a GPU: other compute
        # dtypes loop over the experts (the same tensors are saved for backward).
        if spec.fsdp.mixed_precision.param_dtype != "bfloat16":
            options["experts_implementation"] = "eager"
    try:
        return AutoModelForCausalLM.from_config(
            config, attn_implementation=attention, dtype=torch.float32, **options
        )
    except (ImportError, ValueError) as exc:  # e.g. flash_attention_2 not installed
        raise EngineError(f"model: cannot build the model: {first_line(exc)}") from None


def _call_factory(target: str) -> nn.Module:
    module_name, _, function_name = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise EngineError(f"model.factory {target!r} cannot be imported: {exc}") from None
    model = factory()
    if not isinstance(model, nn.Module):
        raise EngineError(
            f"model.factory {target!r} returned {type(model).__name__}, not nn.Module"
        )
    return model


def materialise(model: nn.Module, device: torch.device, seed: int) -> None:
    """Allocate a meta model (sharded by FSDP2, or whole for FSDP1) on ``device`` and
    initialise it.

    Every base parameter is initialised as a full tensor on the CPU from one seeded
    stream, in module order, and each rank keeps its shard. The values therefore do not
    depend on the number of ranks, the sharding or the FSDP version, which makes
    1-process and N-process runs agree. A LoRA's adapters draw from a stream of their
    own and a module to save starts as a copy of its base module (as peft makes it), so
    the base takes the same values with or without adapters: the merged export rebuilds
    it without them.
    """
    from fsdpspec_runners.engine.lora import adapter_inits, base_module_of

    model.to_empty(device=device)
    init_module = getattr(model, "_init_weights", None)
    adapters = adapter_inits(model, torch.Generator().manual_seed(seed))  # empty without LoRA
    torch.manual_seed(seed)
    originals: dict[str, dict[str, torch.Tensor]] = {}  # the modules to save's, until copied
    with torch.no_grad():
        for name, module in model.named_modules():
            copy_of = originals.pop(base_module_of(name) or "", None)
            full = _initialise_module(module, adapters.get(id(module), init_module), copy_of)
            if ".original_module" in f".{name}.":
                originals[name] = full


def _initialise_module(module: nn.Module, init_module: Any,
                       copy_of: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
    """Initialise a CPU twin of ``module``'s own tensors (or take ``copy_of``'s full
    values, drawing nothing), copy them in, and return the full values."""
    own = {**module._parameters, **module._buffers}
    if not any(t is not None for t in own.values()):
        return {}
    if copy_of is None:
        twin = _shallow_twin(module)
        twin._modules = {}
        twin._parameters = {k: _full_empty(p, parameter=True)
                            for k, p in module._parameters.items()}
        twin._buffers = {k: _full_empty(b) for k, b in module._buffers.items()}
        if init_module is not None:
            init_module(twin)
        elif hasattr(twin, "reset_parameters"):
            twin.reset_parameters()
        copy_of = {name: getattr(twin, name) for name, t in own.items() if t is not None}
    for name, tensor in own.items():
        if tensor is not None and is_quantised(tensor):  # QLoRA's 4-bit base weights
            module._parameters[name] = quantised_shard(tensor, copy_of[name])
        elif tensor is not None:
            _copy_full_into(tensor, copy_of[name])
    return copy_of


def _shallow_twin(module: nn.Module) -> nn.Module:
    """A shallow copy of the same class and attributes, so the init code treats it
    alike. Made without calling the class: ``fully_shard`` gives a sharded module a
    class whose ``__new__`` runs ``__init__`` again (without its arguments), so
    ``copy.copy`` fails on a unit that is a leaf (the size policy makes an Embedding or a
    Linear a unit)."""
    twin = object.__new__(type(module))
    twin.__dict__.update(module.__dict__)
    return twin


def _full_empty(tensor: torch.Tensor | None, *, parameter: bool = False) -> torch.Tensor | None:
    """An uninitialised CPU tensor of the unsharded shape (None stays None)."""
    if tensor is None:
        return None
    # Parameters are initialised in fp32 whatever dtype stores them (a LoRA's frozen base
    # is kept in the compute dtype): the same draws as any other run of the same seed.
    dtype = torch.float32 if parameter and tensor.is_floating_point() else tensor.dtype
    full = torch.empty(tensor.shape, dtype=dtype)
    return nn.Parameter(full, requires_grad=False) if parameter else full


def _copy_full_into(target: torch.Tensor, full: torch.Tensor) -> None:
    if isinstance(target, DTensor):
        # Each rank holds the same full tensor, so no communication is needed.
        shard = distribute_tensor(full, target.device_mesh, target.placements, src_data_rank=None)
        target.to_local().copy_(shard.to_local())
    else:
        target.copy_(full)


def read_weights(weights_dir: str) -> dict[str, torch.Tensor]:
    """A full state dict from a local directory of ``*.safetensors`` (or ``*.bin``)."""
    path = Path(weights_dir)
    if not path.is_dir():
        raise EngineError(f"model.weights: {path} is not a directory")
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    if not files:
        raise EngineError(f"model.weights: no *.safetensors or *.bin files in {path}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(_read_weight_file(file))
    return state


def _read_weight_file(file: Path) -> dict[str, torch.Tensor]:
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(file))
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt or foreign file: report which one
        raise EngineError(f"model.weights: cannot read {file}: {exc}") from None


def tied_weight_keys(model: nn.Module) -> set[str]:
    """State-dict keys that alias another parameter (tied input/output embeddings)."""
    config = getattr(model, "config", None)
    if config is None or not getattr(config.get_text_config(), "tie_word_embeddings", False):
        return set()
    return set(getattr(model, "_tied_weights_keys", None) or ())


def check_loaded_keys(missing: list[str], unexpected: list[str], tied: set[str]) -> None:
    """Weights must cover the model (tied aliases excepted) and hold nothing foreign."""
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        detail = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise EngineError(f"model.weights do not match the model: {detail}")


def load_weights(model: nn.Module, spec: JobSpec, runtime: Runtime, *, sharded: bool) -> None:
    """Load ``model.weights`` into a sharded (FSDP2) or a full (pre-FSDP1) model.

    With ``cpu_ram_efficient_loading`` only rank 0 reads the files: the sharded load
    broadcasts them, and FSDP1 ranks on the meta device receive rank 0's weights when
    FSDP1 synchronises module states. Otherwise every rank reads them.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    on_meta = any(p.is_meta for p in model.parameters())
    from_rank0 = spec.fsdp.cpu_ram_efficient_loading and (sharded or on_meta)
    reads = not on_meta and (runtime.is_main or not from_rank0)
    full = _read_agreed(spec.model.weights, runtime, reads=reads)
    if on_meta:
        return
    if spec.peft is not None:
        from fsdpspec_runners.engine.lora import base_state_dict, is_adapter_key

        full = base_state_dict(model, full) if full else full
    if sharded and spec.peft is not None and spec.peft.method == "qlora":
        _load_quantised(model, full, runtime, reads=reads, from_rank0=from_rank0)
    if sharded:
        options = StateDictOptions(
            full_state_dict=True, broadcast_from_rank0=from_rank0, strict=False
        )
        result = set_model_state_dict(model, full, options=options)
    else:
        result = model.load_state_dict(full, strict=False)
    tied = tied_weight_keys(model)
    if spec.peft is not None:  # the adapters are not in the base weights
        tied |= {k for k in result.missing_keys if is_adapter_key(k)}
    check_loaded_keys(result.missing_keys, result.unexpected_keys, tied)


def _load_quantised(model: nn.Module, full: dict[str, torch.Tensor], runtime: Runtime, *,
                    reads: bool, from_rank0: bool) -> None:
    """QLoRA: ``set_model_state_dict`` cannot write NF4 parameters, so each 4-bit weight
    is taken out of ``full`` (broadcast from rank 0 when only it reads) and quantised
    into this rank's shard by `quantised_shard`; the rest loads as for any model."""
    import torch.distributed as dist

    modules = dict(model.named_modules())
    # ``full`` has the state dict's names, without the wrappers' (checkpointing, compile).
    quantised = [(n, re.sub(_WRAPPER_PARTS, "", n), p) for n, p in model.named_parameters()
                 if is_quantised(p)]
    missing = [key for _, key, _ in quantised if key not in full] if reads else []
    fail_together(EngineError(f"model.weights do not match the model: missing {missing[:3]}")
                  if missing else None, runtime, "model.weights: rank 0 found weights missing")
    for name, key, param in quantised:
        value = full.pop(key).to(param.dtype) if reads else torch.empty(param.shape,
                                                                        dtype=param.dtype)
        if from_rank0:
            value = value.to(runtime.device)
            dist.broadcast(value, src=0)
        owner, _, attr = name.rpartition(".")
        modules[owner]._parameters[attr] = quantised_shard(param, value)


def _read_agreed(weights_dir: str, runtime: Runtime, *, reads: bool) -> dict[str, torch.Tensor]:
    """Read the weights where asked; every rank fails together if any reader failed, so
    no rank is left waiting in the broadcast."""
    failure: EngineError | None = None
    full: dict[str, torch.Tensor] = {}
    if reads:
        try:
            full = read_weights(weights_dir)
        except EngineError as exc:
            failure = exc
    fail_together(failure, runtime, "model.weights: rank 0 could not read the weights")
    return full
