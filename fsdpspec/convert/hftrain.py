"""Hugging Face TrainingArguments' training keys as v1 fields: batch sizes and
accumulation, optimizer, schedule, steps, checkpoints, precision and gradient
checkpointing. HF Trainer reads these keys from its command line or a file; axolotl
hands the same keys (some under its own names, renamed by its importer) to the Trainer.
Values may be strings (a shell command line) or typed (JSON, YAML)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fsdpspec.convert.draft import Draft, Entry, Note
from fsdpspec.convert.fsdpkeys import NotCarried, boolean, whole


def as_bool(value: Any) -> bool:
    return boolean(value)


def as_int(value: Any) -> int:
    if isinstance(value, str) and whole(value) is not None:
        value = whole(value)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**31:
        raise NotCarried(f"{value!r} is not a whole number")
    return value


def as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise NotCarried(f"{value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise NotCarried(f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise NotCarried(f"{value!r} is not a finite number")
    return number


def as_fraction(value: Any) -> float:
    """A number from 0 to 1 (a ratio of the training steps)."""
    number = as_float(value)
    if not 0 <= number <= 1:
        raise NotCarried(f"{value!r} is not a fraction from 0 to 1")
    return number


# HF lr_scheduler_type → v1 schedule. HF's linear and cosine decay to 0.
_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant",
              "constant_with_warmup": "constant"}
# Optimizers that are AdamW with another implementation or storage of its states: the
# update is AdamW's, so the job is AdamW (the plan counts fp32 states).
_ADAMW = {"adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw", "adamw_apex_fused",
          "adamw_anyprecision", "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit",
          "paged_adamw_32bit", "adamw_torch_8bit", "adamw_torch_4bit", "adamw_torch_npu_fused",
          "adamw_torch_xla", "ademamix"}
_SGD = {"sgd"}
_EXACT_ADAMW = {"adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw", "adamw_apex_fused"}
# AdamW whose moments the spec stores the same way: transformers builds
# torchao.optim.AdamW8bit (block size 256, no stochastic rounding: torchao's defaults,
# which the engine's optimizer.state_dtype int8 uses).
_STATE_DTYPES = {"adamw_torch_8bit": "int8"}

# Keys of TrainingArguments that change nothing a spec holds (where logs go, hub
# uploads, evaluation reporting, dataloader tuning).
NO_BEARING = frozenset({
    "do_train", "do_eval", "do_predict", "report_to", "run_name", "logging_dir",
    "logging_strategy", "logging_first_step", "overwrite_output_dir", "push_to_hub",
    "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo", "disable_tqdm",
    "dataloader_num_workers", "dataloader_prefetch_factor", "dataloader_pin_memory",
    "per_device_eval_batch_size", "evaluation_strategy", "eval_strategy", "eval_steps",
    "include_num_input_tokens_seen", "include_tokens_per_second", "remove_unused_columns",
    "ddp_find_unused_parameters", "save_only_model", "log_level", "save_safetensors",
})


def _schedule(draft: Draft, entry: Entry) -> None:
    name = str(entry.value).lower()
    if name not in _SCHEDULES:
        draft.notes.append(Note(entry.at, f"{entry.written} {entry.value}: the spec has "
                                "constant, linear and cosine schedules; not imported"))
        return
    draft.carry("optimizer.scheduler.name", _SCHEDULES[name], entry)
    if _SCHEDULES[name] != "constant":
        draft.put("optimizer.scheduler.min_lr_ratio", 0.0,
                  f"HF's {name} schedule decays to 0 (line {entry.line})")


def _optimizer(draft: Draft, entry: Entry) -> None:
    name = str(entry.value).lower()
    if name in _SGD:
        draft.carry("optimizer.name", "sgd", entry)
    elif name in _STATE_DTYPES:
        draft.carry("optimizer.name", "adamw", entry)
        draft.carry("optimizer.state_dtype", _STATE_DTYPES[name], entry,
                    f": {name} is torchao's AdamW8bit")
    elif name in _ADAMW:
        extra = "" if name in _EXACT_ADAMW else (
            f": {name} keeps AdamW's states in another form; planned as fp32 states")
        draft.carry("optimizer.name", "adamw", entry, extra)
    else:
        draft.refuse(entry.at, f"{entry.written} {entry.value} (an optimizer the spec "
                     "lacks; it has adamw and sgd)")


def _precision(draft: Draft, entry: Entry) -> None:
    if str(entry.value).lower() == "auto":  # axolotl: bf16 where the GPU has it
        draft.carry("fsdp.mixed_precision", "bf16", entry, ": auto, on a GPU with bf16")
    elif as_bool(entry.value):
        draft.carry("fsdp.mixed_precision", entry.written.lstrip("-")[:4], entry)


def _checkpointing(draft: Draft, entry: Entry) -> None:
    if as_bool(entry.value) and draft.value("fsdp.activation_checkpointing") in (None, "none"):
        draft.carry("fsdp.activation_checkpointing", "full", entry,
                    ": every layer recomputed in backward")


def _save(draft: Draft, entry: Entry) -> None:
    strategy = str(entry.value).lower()
    if strategy == "no":
        draft.carry("checkpoint.interval_steps", 0, entry, ": saves only when stopped")
    elif strategy != "steps":
        draft.notes.append(Note(entry.at, f"{entry.written} {entry.value}: the spec saves "
                                "every checkpoint.interval_steps; not imported"))


_SIMPLE: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "per_device_train_batch_size": ("data.micro_batch_size", as_int),
    "learning_rate": ("optimizer.lr", as_float),
    "weight_decay": ("optimizer.weight_decay", as_float),
    "adam_epsilon": ("optimizer.eps", as_float),
    "max_grad_norm": ("optimizer.grad_clip_norm", as_float),
    "warmup_steps": ("optimizer.scheduler.warmup_steps", as_int),
    "save_steps": ("checkpoint.interval_steps", as_int),
    "save_total_limit": ("checkpoint.keep_last", as_int),
    "seed": ("train.seed", as_int),
    "logging_steps": ("logging.interval_steps", as_int),
    "torch_compile": ("train.compile", as_bool),
    "output_dir": ("checkpoint.dir", str),
}

_SPECIAL: dict[str, Callable[[Draft, Entry], None]] = {
    "lr_scheduler_type": _schedule,
    "optim": _optimizer,
    "bf16": _precision,
    "fp16": _precision,
    "gradient_checkpointing": _checkpointing,
    "save_strategy": _save,
}

# The keys apply_training reads; everything else is the caller's to report.
READ = frozenset({*_SIMPLE, *_SPECIAL, "gradient_accumulation_steps", "max_steps",
                  "num_train_epochs", "warmup_ratio", "adam_beta1", "adam_beta2"})


def _steps(draft: Draft, entries: dict[str, Entry]) -> None:
    steps = entries.get("max_steps")
    if steps is not None and as_int(steps.value) > 0:
        draft.carry("train.max_steps", as_int(steps.value), steps)
    elif "num_train_epochs" in entries:
        epochs = entries["num_train_epochs"]
        draft.notes.append(Note(epochs.at, (
            f"{epochs.written} {epochs.value}: steps per epoch depend on the dataset; "
            "set train.max_steps (imported with the default)")))
    ratio = entries.get("warmup_ratio")
    if ratio is not None and "warmup_steps" not in entries:
        max_steps = draft.value("train.max_steps")
        if max_steps:
            draft.carry("optimizer.scheduler.warmup_steps",
                        math.ceil(as_fraction(ratio.value) * max_steps), ratio,
                        f" × {max_steps} steps")
        elif as_fraction(ratio.value) > 0:
            draft.notes.append(Note(ratio.at, (
                f"{ratio.written} {ratio.value}: a fraction of steps the source does not "
                "fix; set optimizer.scheduler.warmup_steps")))


def _betas(draft: Draft, entries: dict[str, Entry]) -> None:
    given = [entries[k] for k in ("adam_beta1", "adam_beta2") if k in entries]
    if given:
        # HF's defaults are 0.9 and 0.999 (the spec's second default is 0.95).
        betas = [as_float(entries["adam_beta1"].value) if "adam_beta1" in entries else 0.9,
                 as_float(entries["adam_beta2"].value) if "adam_beta2" in entries else 0.999]
        draft.put("optimizer.betas", betas, "from " + ", ".join(
            f"{e.written} (line {e.line})" for e in given))
    elif draft.value("optimizer.name", "adamw") == "adamw":
        draft.put("optimizer.betas", [0.9, 0.999], "HF's AdamW default betas")


def _hf_defaults(draft: Draft, entries: dict[str, Entry]) -> None:
    """The Trainer's defaults where the spec's differ (lr 5e-5, a linear schedule to 0)."""
    if "learning_rate" not in entries:
        draft.put("optimizer.lr", 5e-5, "HF's default learning_rate")
    if "lr_scheduler_type" not in entries:
        draft.put("optimizer.scheduler.name", "linear", "HF's default lr_scheduler_type")
        draft.put("optimizer.scheduler.min_lr_ratio", 0.0, "HF's linear schedule decays to 0")


def apply_training(draft: Draft, entries: dict[str, Entry], world: int) -> None:
    """Carry the training keys of ``entries`` (HF names) into the draft; ``world`` is
    the process count (the global batch is micro batch × accumulation × the
    data-parallel ranks of the world)."""
    _hf_defaults(draft, {k: e for k, e in entries.items() if e.value is not None})
    for key, entry in entries.items():
        if key not in READ or entry.value is None:
            continue
        try:
            if key in _SIMPLE:
                target, convert = _SIMPLE[key]
                draft.carry(target, convert(entry.value), entry)
            elif key in _SPECIAL:
                _SPECIAL[key](draft, entry)
        except NotCarried as exc:
            draft.notes.append(Note(entry.at, f"{entry.written}: {exc}; not imported"))
    usable = {k: e for k, e in entries.items() if e.value is not None}
    try:
        _steps(draft, usable)
        _betas(draft, usable)
        accumulation = as_int(usable["gradient_accumulation_steps"].value) \
            if "gradient_accumulation_steps" in usable else 1
    except NotCarried as exc:
        draft.notes.append(Note(None, f"{exc}; not imported"))
        accumulation = 1
    micro = draft.value("data.micro_batch_size", 8)  # HF's default batch per device
    if not draft.has("data.micro_batch_size"):
        draft.put("data.micro_batch_size", micro, "HF's default per_device_train_batch_size")
    where = usable.get("gradient_accumulation_steps")
    ranks = draft.data_parallel_ranks(world)  # a tensor- or context-parallel group reads one
    counted = f"{world} processes" if ranks == world else f"{ranks} data-parallel ranks"
    draft.put("data.global_batch_size", micro * accumulation * ranks,
              f"{micro} per device × {accumulation} accumulation × {counted}"
              + (f" (line {where.line})" if where else ""),
              where or draft.sources.get("data.micro_batch_size"))
