"""axolotl's adapter keys (`adapter: lora|qlora`, `lora_*`, `peft_*`, QLoRA's 4-bit base)
as the spec's `peft` section.

axolotl builds one ``peft.LoraConfig`` from them (axolotl/loaders/adapter.py) and, for
QLoRA, one bitsandbytes 4-bit config (axolotl/loaders/model.py); the engine builds its
LoraConfig from the `peft` section. A key is carried where the two configs then agree;
an adapter feature the section cannot say is refused by name (FS051).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fsdpspec.catalog.families import family
from fsdpspec.convert import hftrain
from fsdpspec.convert.draft import Draft, Entry, Note
from fsdpspec.convert.fsdpkeys import NotCarried

# Keys that make another adapter than the section's, refused when set: the feature each is.
_REFUSED = {
    "peft_use_dora": "DoRA, weight-decomposed adapters",
    "lora_fan_in_fan_out": "adapters on transposed (Conv1D) weights",
    "peft_layers_to_transform": "adapters on some layers only",
    "peft_layers_pattern": "adapters on some layers only",
    "lora_rank_pattern": "a rank per module",
    "lora_alpha_pattern": "an alpha per module",
    "lora_exclude_modules": "modules excluded from the targets",
    "peft_layer_replication": "replicated layers",
    "peft_trainable_token_indices": "trainable token embeddings",
    "loraplus_lr_ratio": "LoRA+, a larger learning rate for B",
    "lora_model_dir": "training on from a saved adapter",
    "peft": "LoftQ initialisation",
    "relora": "ReLoRA, adapters merged and restarted",
    "relora_steps": "ReLoRA, adapters merged and restarted",
}
# axolotl hands QLoRA's base to bitsandbytes as NF4 with double quantization, computing
# in its torch_dtype and storing the 4-bit bytes as bfloat16.
_QLORA_BASE = {"quant_type": "nf4", "double_quant": True, "storage_dtype": "bfloat16"}
# bnb_config_kwargs that override those (axolotl updates its dict with them).
_BNB_KEYS = {"bnb_4bit_quant_type": "quant_type", "bnb_4bit_use_double_quant": "double_quant",
             "bnb_4bit_compute_dtype": "compute_dtype", "bnb_4bit_quant_storage": "storage_dtype"}
_DTYPES = {"bfloat16", "float16", "float32"}
_PRECISION_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}
# Families whose router is an nn.Linear: axolotl's lora_target_linear adapts it, and the
# spec's targets cannot name it (FS140). Measured on transformers 5.24's meta models: for
# every other registered family, the Linear modules but lm_head are its projections
# (tests/convert/test_import_adapters.py checks both).
LINEAR_ROUTERS = frozenset({"phimoe"})

KEYS = frozenset({"adapter", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
                  "lora_target_parameters",
                  "lora_target_linear", "lora_modules_to_save", "peft_use_rslora",
                  "peft_init_lora_weights", "bnb_config_kwargs", *_REFUSED})


def truthy(entry: Entry | None) -> bool:
    return entry is not None and entry.value not in (None, False, "", [], {})


@dataclass(frozen=True)
class Targets:
    """What axolotl's targets say before the model is known: the named modules, and
    whether every linear layer is added (`lora_target_linear`)."""

    named: Entry | None
    linear: Entry | None
    parameters: Entry | None = None  # lora_target_parameters: peft's target_parameters

    def resolve(self, draft: Draft, config: dict[str, Any] | None) -> None:
        """Write peft.target_modules (a string: the regular expression peft full-matches)
        and peft.target_parameters for the model the import settled on (``config``)."""
        if self.parameters is not None and _names(self.parameters.value):
            draft.carry("peft.target_parameters", self.parameters.value, self.parameters)
        names = self.named.value if self.named is not None else []
        names = [names] if isinstance(names, str) else list(names or [])
        if self.linear is None:
            if self.named is not None:
                draft.carry("peft.target_modules", self.named.value, self.named)
            return
        found = family((config or {}).get("model_type"))
        if found is None or found.model_type in LINEAR_ROUTERS:
            what = "outside fsdpspec's families" if found is None else \
                f"{found.model_type}, whose router is a linear layer"
            draft.refuse(self.linear.line, f"lora_target_linear on a model {what} (adapters "
                         "on every linear layer, which peft.target_modules cannot list here)",
                         code="FS051")
            return
        extra = [name for name in names if name not in found.lora_targets]
        # Empty is the family's projections, every linear layer but lm_head.
        draft.put("peft.target_modules", [*found.lora_targets, *extra] if extra else [],
                  f"from lora_target_linear (line {self.linear.line}): every linear layer "
                  f"but lm_head, {found.prefix}'s projections"
                  + (f", and lora_target_modules (line {self.named.line})" if extra else ""))


def _refusals(entries: dict[str, Entry], draft: Draft) -> None:
    for key, feature in _REFUSED.items():
        entry = entries.get(key)
        if truthy(entry):
            value = entry.value if isinstance(entry.value, (str, int, float)) else "…"
            draft.refuse(entry.line, f"{key} {value} ({feature})", code="FS051")
    init = entries.get("peft_init_lora_weights")
    if init is not None and init.value not in (None, True):
        draft.refuse(init.line, f"peft_init_lora_weights {init.value} (an adapter "
                     "initialisation other than peft's default)", code="FS051")
    named, linear = entries.get("lora_target_modules"), entries.get("lora_target_linear")
    parameters = entries.get("lora_target_parameters")
    if truthy(parameters) and not _names(parameters.value):
        draft.refusals.append(Note(parameters.line, "FS052 lora_target_parameters is not a "
                                   "list of parameter names"))
    if truthy(named) and not isinstance(named.value, str) and not _names(named.value):
        draft.refusals.append(Note(named.line, "FS052 lora_target_modules is not a list of "
                                   "module names"))
    elif not truthy(named) and not truthy(linear) and not truthy(parameters):
        adapter = entries["adapter"]
        draft.refusals.append(Note(adapter.line, f"FS052 adapter {adapter.value} with neither "
                                   "lora_target_modules, lora_target_linear nor "
                                   "lora_target_parameters (peft finds nothing to adapt)"))


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) and n for n in value)


def _number(draft: Draft, entries: dict[str, Entry], key: str, target: str,
            convert: Any) -> Any:
    entry = entries.get(key)
    if entry is None or entry.value is None:
        return None
    try:
        value = convert(entry.value)
    except NotCarried as exc:
        draft.refusals.append(Note(entry.line, f"FS052 {key} {exc}"))
        return None
    draft.carry(target, value, entry)
    return value


def _scale(draft: Draft, entries: dict[str, Entry], rank: int) -> None:
    """lora_alpha, and rsLoRA's alpha/√r scale as the spec's alpha/r."""
    value = _number(draft, entries, "lora_alpha", "peft.alpha", hftrain.as_float)
    rslora = entries.get("peft_use_rslora")
    if value is not None and truthy(rslora):
        rslora_alpha(draft, value, rank, rslora)


def rslora_alpha(draft: Draft, alpha: float, rank: int, rslora: Entry) -> None:
    """rsLoRA (peft's use_rslora, which ``rslora`` turns on) scales by alpha/√r: the
    spec's alpha/r with alpha × √r."""
    draft.put("peft.alpha", alpha * math.sqrt(rank),
              f"lora_alpha {alpha:g} × √r, from {rslora.written} (line {rslora.line}): "
              f"rsLoRA scales by alpha/√r, the spec by alpha/r")


def _quantization(draft: Draft, entries: dict[str, Entry], load: Entry | None) -> None:
    """QLoRA's 4-bit base as axolotl hands it to bitsandbytes."""
    if load is None or load.value is not True:
        adapter = entries["adapter"]
        draft.refusals.append(Note(adapter.line, "FS052 adapter qlora without load_in_4bit: "
                                   "true (axolotl requires it)"))
        return
    precision = draft.value("fsdp.mixed_precision", "fp32")
    base = {**_QLORA_BASE, "compute_dtype": _PRECISION_DTYPE.get(precision, "float32")}
    comments = {name: f"axolotl's QLoRA base (load_in_4bit, line {load.line})"
                for name in base}
    comments["compute_dtype"] = f"axolotl computes in its torch_dtype ({precision})"
    sources = dict.fromkeys(base, load)  # where a refusal of the value points
    kwargs = entries.get("bnb_config_kwargs")
    if kwargs is not None and isinstance(kwargs.value, dict):
        for key, value in kwargs.value.items():
            name = _BNB_KEYS.get(key)
            valid = name is not None and (
                isinstance(value, bool) if name == "double_quant" else
                isinstance(value, str) and value in (
                    ("nf4", "fp4") if name == "quant_type" else _DTYPES))
            if valid:
                base[name], comments[name] = value, f"from bnb_config_kwargs {key} " \
                    f"(line {kwargs.line})"
                sources[name] = Entry(value, kwargs.line, f"bnb_config_kwargs {key}")
            elif name is None and key.startswith("llm_int8_"):
                continue  # 8-bit options: bitsandbytes ignores them for a 4-bit base
            else:
                draft.refuse(kwargs.line, f"bnb_config_kwargs {key} {value!r} (a 4-bit base "
                             "quantized otherwise)", code="FS051")
    elif truthy(kwargs):
        draft.refusals.append(Note(kwargs.line, "FS052 bnb_config_kwargs is not a mapping"))
    for name, value in base.items():
        draft.put(f"peft.quantization.{name}", value, comments[name], sources[name])


# FSDP1 options FSDP2 has no use for (FS901): it prefetches one unit ahead, bounds its
# own memory and keeps the original parameters.
_FSDP1_ONLY = ("backward_prefetch", "forward_prefetch", "limit_all_gathers", "use_orig_params")


def qlora_under_fsdp2(draft: Draft) -> None:
    """QLoRA written for FSDP1 (axolotl's classic QLoRA + FSDP path) as FSDP2, the
    version under which the engine trains it (FS312: FSDP1 flattens a unit into one
    dtype and cannot shard the 4-bit base); the same job, sharded the same way. The
    FSDP1-only options go with it, and the note names the change and why."""
    if draft.value("peft.method") != "qlora" or draft.value("fsdp.version") != 1:
        return
    source = draft.sources.get("fsdp.version") or draft.sources.get("peft.method")
    where = source.at if source else None
    dropped = [name for name in _FSDP1_ONLY if draft.fields.pop(f"fsdp.{name}", None)]
    draft.put("fsdp.version", 2, "QLoRA: the engine trains it under FSDP2 only (the "
              "source runs FSDP1; see the note)", source)
    draft.notes.append(Note(where, (
        "QLoRA under FSDP1: imported as fsdp.version 2, because fsdpspec's engine trains "
        "QLoRA under FSDP2 only (FSDP1 cannot shard its 4-bit weights, FS312); same "
        "sharding, offload and checkpointing"
        + (f"; FSDP1-only {', '.join(dropped)} not imported" if dropped else ""))))


def apply_adapter(entries: dict[str, Entry], draft: Draft) -> Targets | None:
    """Carry the adapter into `peft` (or refuse it); the targets, resolved once the
    model is known (None without an adapter). Call after the precision is carried."""
    adapter = entries.get("adapter")
    if not truthy(adapter):
        for key in sorted(KEYS - {"adapter", "peft"}):
            if truthy(entries.get(key)):
                draft.note(entries[key], f"{key}: no adapter is set, so axolotl trains none; "
                           "not imported")
        return None
    if adapter.value not in ("lora", "qlora"):
        draft.refuse(adapter.line, f"adapter {adapter.value} (an adapter other than LoRA and "
                     "QLoRA)", code="FS051")
        return None
    draft.carry("peft.method", adapter.value, adapter)
    _refusals(entries, draft)
    for key in ("lora_r", "lora_alpha"):
        if entries.get(key) is None or entries[key].value is None:
            # axolotl hands peft None, and peft stops on it (a TypeError).
            draft.refusals.append(Note(adapter.line, f"FS052 adapter {adapter.value} without "
                                       f"{key} (peft stops on it)"))
    rank = _number(draft, entries, "lora_r", "peft.r", hftrain.as_int)
    if rank is not None and rank < 1:
        draft.refusals.append(Note(entries["lora_r"].line, f"FS052 lora_r {rank} is not a rank"))
    rank = rank if rank is not None and rank > 0 else 1  # refused above
    _scale(draft, entries, rank)
    _number(draft, entries, "lora_dropout", "peft.dropout", hftrain.as_float)
    saved = entries.get("lora_modules_to_save")
    if truthy(saved):
        names = saved.value if isinstance(saved.value, list) else [saved.value]
        if all(isinstance(name, str) and name for name in names):
            draft.carry("peft.modules_to_save", names, saved)
        else:
            draft.refusals.append(Note(saved.line, "FS052 lora_modules_to_save is not a list "
                                       "of module names"))
    if adapter.value == "qlora":
        _quantization(draft, entries, entries.get("load_in_4bit"))
    named = entries.get("lora_target_modules")
    linear = entries.get("lora_target_linear")
    parameters = entries.get("lora_target_parameters")
    return Targets(named if truthy(named) else None, linear if truthy(linear) else None,
                   parameters if truthy(parameters) else None)
