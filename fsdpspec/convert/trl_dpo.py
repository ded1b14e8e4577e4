"""TRL's DPO script (`trl/scripts/dpo.py`, `trl dpo`, `python -m trl.scripts.dpo`) through
the Trainer importer, as `train.objective: dpo` (docs/dpo.md).

The script parses ScriptArguments, DPOConfig (TrainingArguments and TRL's DPO keys) and
ModelConfig (TRL 1.16, trl/scripts/dpo.py) and hands them to `DPOTrainer`: the training
keys are hftrain's, over DPOConfig's own defaults where they differ from the Trainer's
(learning rate 1e-6, gradient checkpointing and bf16 on, max_length 1024); beta, the
loss, label smoothing and the reference go through `dpo`, as axolotl's do. `--use_peft`
builds peft's LoraConfig from lora_r, lora_alpha, lora_dropout and lora_target_modules
(TRL's defaults 16, 32 and 0.05; without targets, peft's for the model type), and the
reference of an adapter run is its base with the adapters off. `--dataset_name` is the
preference data. What changes the loss or the model in a way the spec cannot say is
refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from fsdpspec.catalog.families import family
from fsdpspec.catalog.hub import cached_snapshot, parse_hub_id
from fsdpspec.convert import dpo, hftrain
from fsdpspec.convert.axolotl_lora import rslora_alpha
from fsdpspec.convert.draft import Draft, Entry, Note
from fsdpspec.convert.fsdpkeys import NotCarried
from fsdpspec.convert.sources import named_file_exists
from fsdpspec.spec.v1 import Model

# DPOConfig's defaults where the Trainer's (hftrain) or the spec's differ, by key.
_LEARNING_RATE, _MAX_LENGTH = 1e-6, 1024
# ModelConfig's LoRA defaults: key → (field, default, convert).
_LORA = {"lora_r": ("peft.r", 16, hftrain.as_int),
         "lora_alpha": ("peft.alpha", 32, hftrain.as_float),
         "lora_dropout": ("peft.dropout", 0.05, hftrain.as_float)}
_LORA_LISTS = {"lora_modules_to_save": "peft.modules_to_save",
               "lora_target_parameters": "peft.target_parameters"}
_LORA_KEYS = frozenset({*_LORA, *_LORA_LISTS, "lora_target_modules", "use_rslora",
                        "use_dora", "lora_task_type"})
# Switches refused when on: the feature each is, and its code.
_SWITCHES = {
    "use_weighting": ("WPO's weighting of the DPO loss", "FS050"),
    "sync_ref_model": ("TR-DPO's reference, synced with the policy", "FS050"),
    "reference_free": ("DPO without a reference (TRL before 1.0)", "FS050"),
    "activation_offloading": ("activation offloading to the CPU", "FS050"),
    "load_in_8bit": ("an 8-bit quantized base model", "FS050"),
    "use_dora": ("DoRA, weight-decomposed adapters", "FS051"),
}
# Settings refused when given at all: the feature each is.
_GIVEN = {
    "rpo_alpha": "RPO's NLL term beside the DPO loss (TRL before 1.0)",
    "ld_alpha": "LD-DPO's weighting of the verbose tokens",
    "loss_weights": "several DPO losses, weighted and summed",
}
# Settings refused when other than DPOConfig's (and the spec's) one value.
_CHOICES = {
    "truncation_mode": ("keep_start", "the prompt's start cut (keep_end); the spec cuts the "
                                      "completion's end"),
    "f_divergence_type": ("reverse_kl", "f-DPO's regularizer"),
    "lora_task_type": ("CAUSAL_LM", "an adapter for another head than the causal LM's"),
}
# Keys that change nothing the spec holds: how fast the data and the reference pass are
# prepared, how the eval split is named, and what TRL 1.16 no longer reads.
_NO_BEARING = frozenset({"precompute_ref_batch_size", "dataset_num_proc",
                         "pad_to_multiple_of", "dataset_test_split", "ignore_bias_buffers",
                         "padding_free"})
_DATA = frozenset({"dataset_name", "dataset_train_split", "dataset_streaming"})
# Arguments said, with why, and not imported.
_LENGTH = ("not a DPOConfig argument in TRL 1.16 (older TRL cut the prompt or completion "
           "to it); the spec cuts prompt + completion at data.seq_len")
_NOTED = {"max_prompt_length": _LENGTH, "max_completion_length": _LENGTH,
          "config": "TRL's file of script arguments is not read here"}
KEYS = frozenset({"beta", "loss_type", "label_smoothing", "precompute_ref_log_probs",
                  "use_peft", "attn_implementation", "load_in_4bit", *_LORA_KEYS, *_SWITCHES,
                  *_GIVEN, *_CHOICES, *_NO_BEARING, *_DATA, *_NOTED})
_ATTENTION = frozenset(get_args(Model.field_types()["attention"])) - {"auto"}

WithModel = Callable[[Draft, "dict[str, Any] | None"], None]


def apply_dpo(args: dict[str, Entry], program: Entry, draft: Draft,
              base_dir: Path) -> WithModel | None:
    """train.objective dpo, its data and its adapter from the script's arguments; what
    writes the adapter's targets once the model is known (None when it needs nothing)."""
    draft.carry("train.objective", "dpo", program)
    _refusals(args, draft)
    _trl_defaults(args, draft)
    if "beta" in args:
        _number(args["beta"], "train.dpo.beta", hftrain.as_float, draft)
    else:
        dpo.carry_beta(None, draft)
    if "label_smoothing" in args:
        _number(args["label_smoothing"], "train.dpo.label_smoothing", hftrain.as_float, draft)
    dpo.carry_loss(args.get("loss_type"), draft)
    adapter, targets = _adapter(args, draft)
    dpo.carry_reference(draft, objective=program, adapter=adapter,
                        precompute=args.get("precompute_ref_log_probs"))
    _data(args, draft, base_dir)
    _attention(args.get("attn_implementation"), draft)
    for key, why in _NOTED.items():
        if key in args:
            draft.note(args[key], f"{args[key].written} {args[key].value}: {why}; not imported")
    return targets


def _refusals(args: dict[str, Entry], draft: Draft) -> None:
    for key, (feature, code) in _SWITCHES.items():
        if key in args and _on(args[key], draft):
            draft.refuse(args[key].at, f"{args[key].written} ({feature})", code=code)
    qlora = args.get("load_in_4bit")
    if qlora is not None and _on(qlora, draft):
        draft.refusals.append(Note(qlora.at, (
            f"FS050 {qlora.written} (TRL's QLoRA, a 4-bit bitsandbytes base): not read by "
            "this import yet; the spec says QLoRA as peft.method qlora, written by hand")))
    for key, feature in _GIVEN.items():
        if key in args and str(args[key].value) != "None":
            draft.refuse(args[key].at, f"{args[key].written} {args[key].value} ({feature})")
    for key, (value, feature) in _CHOICES.items():
        if key in args and args[key].value != value:
            code = "FS051" if key in _LORA_KEYS else "FS050"
            draft.refuse(args[key].at, f"{args[key].written} {args[key].value} ({feature})",
                         code=code)


def _on(entry: Entry, draft: Draft) -> bool:
    """A boolean argument's value; one of no boolean shape is refused (TRL's parser
    stops on it)."""
    try:
        return hftrain.as_bool(entry.value)
    except NotCarried as exc:
        draft.refusals.append(Note(entry.at, f"FS052 {entry.written}: {exc}"))
        return False


def _trl_defaults(args: dict[str, Entry], draft: Draft) -> None:
    """DPOConfig's defaults where the script says nothing and the Trainer's differ."""
    if "learning_rate" not in args:
        draft.put("optimizer.lr", _LEARNING_RATE, "not in the source: DPOConfig's default "
                  "learning_rate")
    if "gradient_checkpointing" not in args and \
            draft.value("fsdp.activation_checkpointing") in (None, "none"):
        draft.put("fsdp.activation_checkpointing", "full", "not in the source: DPOConfig's "
                  "default gradient_checkpointing true (every layer recomputed in backward)")
    if "bf16" not in args and "fp16" not in args and not draft.has("fsdp.mixed_precision"):
        draft.put("fsdp.mixed_precision", "bf16", "not in the source: DPOConfig's bf16, "
                  "true where fp16 is not set")
    if "max_length" not in args:
        draft.put("data.seq_len", _MAX_LENGTH, "not in the source: DPOConfig's default "
                  "max_length")


def _number(entry: Entry, dotted: str, convert: Callable[[Any], Any], draft: Draft) -> Any:
    """A number TRL's parser reads, carried; one it cannot read is refused (its parser
    stops on it)."""
    try:
        value = convert(entry.value)
    except NotCarried as exc:
        draft.refusals.append(Note(entry.at, f"FS052 {entry.written}: {exc}"))
        return None
    draft.carry(dotted, value, entry)
    return value


def _adapter(args: dict[str, Entry], draft: Draft) -> tuple[Entry | None, WithModel | None]:
    """ModelConfig's LoRA as `peft`: the --use_peft entry (None without an adapter) and
    what writes peft's default targets once the model is known."""
    use = args.get("use_peft")
    if use is None or not _on(use, draft):
        for key in sorted(_LORA_KEYS & set(args)):
            draft.note(args[key], f"{args[key].written}: no --use_peft, so TRL trains no "
                       "adapter; not imported")
        return None, None
    draft.carry("peft.method", "lora", use, ": TRL's LoraConfig (ModelConfig's lora_*)")
    values = {}
    for key, (dotted, default, convert) in _LORA.items():
        if key in args:
            values[key] = _number(args[key], dotted, convert, draft)
        else:
            values[key] = default
            draft.put(dotted, default, f"not in the source: TRL's default {key}")
    rslora = args.get("use_rslora")
    if rslora is not None and _on(rslora, draft) and None not in values.values():
        rslora_alpha(draft, values["lora_alpha"], values["lora_r"], rslora)
    for key, dotted in _LORA_LISTS.items():
        if key in args:
            value = args[key].value
            draft.carry(dotted, value if isinstance(value, list) else [value], args[key])
    named = args.get("lora_target_modules")
    if named is not None:
        _named_targets(named, draft)
        return use, None
    return use, lambda draft, config: _default_targets(use, draft, config)


def _named_targets(named: Entry, draft: Draft) -> None:
    """ModelConfig turns one --lora_target_modules into a string, which peft full-matches
    against each module's path as a regular expression (`all-linear` aside): the spec's
    string form says the same."""
    value = named.value
    if isinstance(value, list):
        draft.carry("peft.target_modules", value, named)
    elif value == "all-linear":
        draft.carry("peft.target_modules", [value], named)
    else:
        draft.carry("peft.target_modules", value, named, ": one name, which peft full-"
                    "matches against each module's path as a regular expression")


def _default_targets(use: Entry, draft: Draft, config: dict[str, Any] | None) -> None:
    """No --lora_target_modules: TRL hands peft none, and peft adapts its default
    targets for the model type, or stops where it has none."""
    found = family((config or {}).get("model_type"))
    if found is None or not found.peft_default_targets:
        model_type = found.model_type if found else "of a type fsdpspec cannot tell"
        draft.refuse(use.at, f"{use.written} without --lora_target_modules on a model "
                     f"{model_type} (peft has no default targets for it; TRL's LoraConfig "
                     "stops)", code="FS051")
        return
    draft.put("peft.target_modules", list(found.peft_default_targets),
              f"not in the source: peft's default targets for {found.model_type} (TRL's "
              f"LoraConfig names none; {use.written}, line {use.line})", use)


def _data(args: dict[str, Entry], draft: Draft, base_dir: Path) -> None:
    """--dataset_name as preference data, whose records are assumed to hold the spec's
    prompt, chosen and rejected (and said so)."""
    name = args.get("dataset_name")
    if name is None:
        return
    draft.carry("data.source", "dataset", name)
    draft.carry("data.path", name.value, name)
    draft.carry("data.format", "preference", name, ": DPO's pairs")
    draft.note(name, f"{name.written} {name.value}: imported as data.format preference, "
               f"assuming each record holds {dpo.RECORDS_ASSUMED}")
    hub = parse_hub_id(str(name.value), "dataset")
    if not (named_file_exists(base_dir / str(name.value)) or (hub and cached_snapshot(hub))):
        draft.note(name, f"{name.written} {name.value}: not on this machine or in the "
                   "Hugging Face cache: fetch it, or --set data.path to a local preference "
                   "file")
    if "dataset_train_split" in args:
        draft.carry("data.split", args["dataset_train_split"].value, args["dataset_train_split"])
    streaming = args.get("dataset_streaming")
    if streaming is not None and _on(streaming, draft):
        draft.carry("data.streaming", True, streaming)


def _attention(entry: Entry | None, draft: Draft) -> None:
    if entry is None:
        return
    if isinstance(entry.value, str) and entry.value in _ATTENTION:
        draft.carry("model.attention", entry.value, entry)
    else:
        draft.note(entry, f"{entry.written} {entry.value}: the spec has "
                   f"{', '.join(sorted(_ATTENTION))}; not imported")
