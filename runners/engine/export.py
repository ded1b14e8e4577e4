"""A DCP checkpoint → a complete Hugging Face model directory, one unit at a time.

The directory holds ``config.json``, ``generation_config.json``, the tokenizer files when
the run used a tokenizer, and the weights in the spec's dtype: ``model.safetensors``, or
``model-0000i-of-0000n.safetensors`` files and ``model.safetensors.index.json`` when
they exceed ``checkpoint.final.max_shard_mb``. Files are 0644.

Only one unit's tensors (a decoder layer, or one tensor outside the layers) are read
from the checkpoint at a time, through DCP's reader, and written out once a shard is
full: host memory holds at most one unit in its saved dtype plus one shard, never the
whole model. The final export of a run converts the run's last checkpoint the same way.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from fsdpspec.atomicio import building_dir, describe_error
from fsdpspec.job.job import Job
from fsdpspec.job.rundir import FINAL
from fsdpspec.jsonfile import JsonFileError
from fsdpspec_runners.engine.checkpoint import FULL_FILE
from fsdpspec_runners.engine.errors import EngineError, first_line
from fsdpspec_runners.engine.model_build import build_model, tied_weight_keys
from fsdpspec_runners.engine.wrap import DTYPES

FINAL_DIR = FINAL
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_MODEL = "model."  # the checkpoint's prefix of model tensors
_LAYER = re.compile(r"^(.*?\.\d+)\.")  # a key inside a numbered layer: that layer is its unit


class CheckpointUnverified(EngineError):
    """The checkpoint to export does not match its manifest (a truncated, changed or
    missing file), or holds what the run's resolved spec does not describe (FS042);
    nothing was written."""


def export_checkpoint(checkpoint: Path, job: Job, target: Path, *,
                      replace: bool = True) -> Path:
    """Write ``target`` (built under a temp name beside it, renamed into place; removed
    on any failure) from a DCP checkpoint of a run of ``job``: a Hugging Face model, or
    for a LoRA its adapter (and, with ``peft.merged``, the merged model). An existing
    ``target`` is replaced only with ``replace``."""
    try:
        with building_dir(target, replace=replace) as tmp:
            if job.spec.peft is not None:
                _write_lora(checkpoint, job, tmp)
            else:
                # The model's config, key order and tied keys, with no storage; eager
                # attention, so converting needs no attention kernel installed.
                module = build_model(job, on_meta=True, attention="eager")
                write_model_dir(checkpoint, units_of(saved_keys(checkpoint), module), module,
                                job, tmp)
    except EngineError:
        raise
    except OSError as exc:
        raise EngineError(f"{target}: {describe_error(exc)}; nothing was written") from None
    except Exception as exc:  # a shard DCP or torch cannot read, though it verified
        raise EngineError(f"{checkpoint} cannot be converted: {first_line(exc)}; nothing "
                          "was written") from None
    return target


def _write_lora(checkpoint: Path, job: Job, directory: Path) -> None:
    """``directory/adapter/`` from a LoRA checkpoint's trainable tensors; with
    ``peft.merged`` also the merged model in ``directory``."""
    from fsdpspec_runners.engine.lora_export import ADAPTER_DIR, merged_model, write_adapter

    peft = job.spec.peft
    assert peft is not None
    trainable = read_unit(checkpoint, saved_keys(checkpoint))
    write_adapter(trainable, job, directory / ADAPTER_DIR)
    if peft.merged:
        module = merged_model(trainable, job)
        write_model_dir(checkpoint, units_of(module.state_dict(), module), module, job,
                        directory)


def write_model_dir(checkpoint: Path, units: list[dict[str, Any]], module: nn.Module,
                    job: Job, directory: Path) -> None:
    """Weights (``units``: the checkpoint's tensors, or tensors in memory), configs and
    tokenizer of a Hugging Face model directory; ``module`` gives the config."""
    final = job.spec.checkpoint.final
    _write_weights(checkpoint, units, DTYPES[final.dtype], job.export_shard_bytes, directory)
    tokenizer = _save_tokenizer(job.spec.data.tokenizer, directory)
    _save_configs(module, DTYPES[final.dtype], tokenizer, directory)
    for file in directory.iterdir():
        if file.is_file():  # readable by whoever serves the model, as save_pretrained leaves it
            file.chmod(0o644)


def export_run(run_dir: Path, step: int | None, target: Path, *, replace: bool = False) -> Path:
    """``fsdpspec export hf``: a run's checkpoint (the newest complete one, or ``step``),
    verified against its manifest, as a Hugging Face directory at ``target``."""
    from fsdpspec.runfiles.resolved import FILENAME, read_resolved_job
    from fsdpspec_runners.engine.checkpoint import (
        ENTRY_FILES,
        complete_checkpoints,
        model_state_held,
        step_dir_name,
    )
    from fsdpspec_runners.engine.manifest import verification_problem

    try:
        job, _ = read_resolved_job(run_dir / FILENAME)
    except JsonFileError as exc:
        raise EngineError(f"{run_dir} is not a run directory: {exc.coded()}") from None
    found = complete_checkpoints(run_dir)
    if step is not None:
        found = [p for p in found if p.name == step_dir_name(step)]
    if not found:
        which = f"at step {step}" if step is not None else "complete"
        raise EngineError(f"{run_dir} has no {which} checkpoint; "
                          f"have: {', '.join(p.name for p in complete_checkpoints(run_dir))}")
    problem = verification_problem(found[-1], ENTRY_FILES)
    if problem:
        raise CheckpointUnverified(f"{found[-1]} does not verify: {problem}; nothing was "
                                   "written")
    problem = _holds_problem(found[-1], job)
    if problem:
        raise CheckpointUnverified(f"{found[-1]} holds {problem}, but {run_dir / FILENAME} "
                                   f"describes {_described(model_state_held(job))}; nothing "
                                   "was written")
    return export_checkpoint(found[-1], job, target, replace=replace)


def _described(holds: Any) -> str:
    """A manifest's ``holds`` record in words."""
    if not isinstance(holds, dict) or holds.get("kind") not in ("full", "adapter"):
        return f"an unknown record {str(holds)[:60]!r}"
    if holds["kind"] == "full":
        return "a full model"
    targets = ", ".join(map(str, holds.get("targets") or [])) or "no module"
    return (f"a {holds.get('method')} adapter of r {holds.get('r')}, alpha "
            f"{holds.get('alpha')} on {targets}")


def _holds_problem(checkpoint: Path, job: Job) -> str | None:
    """What ``checkpoint`` holds, in words, when it is not what a checkpoint of ``job``
    holds (None when it is): by its manifest's record, and by its tensors (their kind
    and the adapters' rank), which an edited resolved-spec.json cannot change."""
    from fsdpspec_runners.engine.checkpoint import model_state_held
    from fsdpspec_runners.engine.lora import is_adapter_key
    from fsdpspec_runners.engine.manifest import recorded_holds

    expected = model_state_held(job)
    try:
        recorded = recorded_holds(checkpoint)
    except JsonFileError as exc:  # replaced since it verified
        return f"an unreadable manifest ({exc.coded()})"
    if recorded is not None and recorded != expected:
        return _described(recorded)
    saved = saved_keys(checkpoint)
    ranks = {_shape(meta)[0] for key, meta in saved.items() if ".lora_A." in key}
    adapters = any(is_adapter_key(key) for key in saved)
    if adapters != (job.spec.peft is not None):
        return f"{len(saved)} {'adapter' if adapters else 'full-model'} tensors"
    if adapters and ranks != {expected["r"]}:
        return f"adapters of rank {', '.join(map(str, sorted(ranks)))}"
    return None


def _shape(meta: Any) -> tuple[int, ...]:
    """A saved tensor's full shape: DCP's metadata, or a full state dict's tensor."""
    return tuple(meta.shape if isinstance(meta, torch.Tensor) else meta.size)


def saved_keys(checkpoint: Path) -> dict[str, Any]:
    """The model tensors a checkpoint holds, by parameter name: DCP's metadata (each unit
    is read when its turn comes), or a FULL_STATE_DICT file's tensors, memory-mapped (a
    tensor is read from disk when it is used)."""
    full = checkpoint / FULL_FILE
    if full.is_file():
        try:
            payload = torch.load(full, map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:  # a truncated or foreign file: say which
            raise EngineError(f"{full} is not a readable checkpoint: {first_line(exc)}") from None
        return dict(payload["model"])
    try:
        metadata = dcp.FileSystemReader(str(checkpoint)).read_metadata()
    except (OSError, ValueError) as exc:
        raise EngineError(f"{checkpoint} is not a readable checkpoint: {exc}") from None
    return {
        key[len(_MODEL):]: meta
        for key, meta in metadata.state_dict_metadata.items()
        if key.startswith(_MODEL) and isinstance(meta, TensorStorageMetadata)
    }


def units_of(saved: dict[str, Any], module: nn.Module) -> list[dict[str, Any]]:
    """The checkpoint's tensors grouped by unit, in the model's order (tied aliases out)."""
    tied = tied_weight_keys(module)
    order = [k for k in module.state_dict() if k in saved and k not in tied]
    order += sorted(k for k in saved if k not in order and k not in tied)
    units: dict[str, dict[str, Any]] = {}
    for key in order:
        match = _LAYER.match(key)
        units.setdefault(match.group(1) if match else key, {})[key] = saved[key]
    return list(units.values())


def read_unit(checkpoint: Path, unit: dict[str, Any]) -> dict[str, Any]:
    """One unit's full tensors, read from every rank's shards (a full state dict's are
    its mapped tensors already)."""
    if all(isinstance(value, torch.Tensor) for value in unit.values()):
        return dict(unit)
    state = {
        key: torch.empty(meta.size, dtype=meta.properties.dtype) for key, meta in unit.items()
    }
    with warnings.catch_warnings():
        # Reading without a process group is the point here, not something to warn about.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": state}, checkpoint_id=str(checkpoint), no_dist=True)
    return state


def _shards(
    checkpoint: Path, units: list[dict[str, Any]], dtype: torch.dtype, max_bytes: int
) -> Iterator[dict[str, torch.Tensor]]:
    """Tensors in ``dtype`` grouped into shards of at most ``max_bytes`` (a unit larger
    than that is a shard of its own)."""
    shard: dict[str, torch.Tensor] = {}
    size = 0
    for unit in units:
        tensors = {k: v.to(dtype).contiguous() for k, v in read_unit(checkpoint, unit).items()}
        unit_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
        if shard and size + unit_bytes > max_bytes:
            yield shard
            shard, size = {}, 0
        shard.update(tensors)
        size += unit_bytes
    if shard:
        yield shard


def _write_weights(
    checkpoint: Path, units: list[dict[str, Any]], dtype: torch.dtype, max_bytes: int,
    directory: Path,
) -> None:
    """``model.safetensors``, or numbered shards and their index."""
    from safetensors.torch import save_file

    names: list[list[str]] = []
    total = 0
    for index, shard in enumerate(_shards(checkpoint, units, dtype, max_bytes)):
        save_file(shard, str(directory / f"shard-{index}"), metadata={"format": "pt"})
        names.append(list(shard))
        total += sum(t.numel() * t.element_size() for t in shard.values())
    if len(names) == 1:
        os.replace(directory / "shard-0", directory / WEIGHTS_FILE)
        return
    weight_map = {}
    for index, keys in enumerate(names):
        name = f"model-{index + 1:05d}-of-{len(names):05d}.safetensors"
        os.replace(directory / f"shard-{index}", directory / name)
        weight_map.update(dict.fromkeys(keys, name))
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX_FILE).write_text(json.dumps(index_doc, indent=2) + "\n", encoding="utf-8")


def _save_tokenizer(directory: str | None, target: Path) -> Any:
    """The run's tokenizer files beside the weights (None for byte-level tokens)."""
    if directory is None:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    tokenizer.save_pretrained(target)
    return tokenizer


def _save_configs(module: nn.Module, dtype: torch.dtype, tokenizer: Any, target: Path) -> None:
    """config.json and generation_config.json (a factory model has neither)."""
    config = getattr(module, "config", None)
    if config is None:
        return
    from transformers import GenerationConfig

    config = config.__class__.from_dict(config.to_dict())
    config.dtype = dtype
    config.use_cache = True  # off only for training; generation wants it
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            setattr(config, name, value)
    config.save_pretrained(target)
    GenerationConfig.from_model_config(config).save_pretrained(target)

