"""`fsdpspec import axolotl CONFIG.yaml`: an axolotl config as a v1 spec.

axolotl hands its training keys to the HF Trainer (some under its own names, renamed
here for hftrain) and its FSDP settings to accelerate, in two generations: FSDP1 as
`fsdp: [full_shard, auto_wrap]` with `fsdp_`-prefixed `fsdp_config` keys, FSDP2 as
`fsdp_version: 2` with unprefixed keys. Its parallelism sizes follow accelerate's
parallelism_config: replicas of shard groups are hybrid sharding, the tensor-, context-
and expert-parallel sizes are the `parallelism` degrees, and the others (and activation
offloading) are refused by name. `fp8` is torchao's float8 through accelerate
(fsdpspec/convert/float8.py). LoRA and QLoRA adapters are the `peft` section
(`adapters`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdpspec.convert import axolotl_dpo, axolotl_lora, hftrain
from fsdpspec.convert.draft import Assumptions, Draft, Entry, ImportRefused, Note
from fsdpspec.convert.float8 import ACCELERATE_EXCLUDE, Value, apply_float8, keeps_first_linear
from fsdpspec.convert.fsdpkeys import NotCarried, apply_fsdp, boolean, read_keys, take_layers
from fsdpspec.convert.importer import Imported, finish
from fsdpspec.convert.sources import Document, named_file_exists, read_yaml
from fsdpspec.convert.trainer import fsdp_entries, positioned_config
from fsdpspec.spec.load import join

# axolotl key → the TrainingArguments name it is handed to the Trainer as.
_RENAMED = {
    "micro_batch_size": "per_device_train_batch_size",
    "num_epochs": "num_train_epochs",
    "lr_scheduler": "lr_scheduler_type",
    "optimizer": "optim",
    "torch_compile": "torch_compile",
}
# Sizes the spec says, and the field of each.
_DEGREES = {"tensor_parallel_size": "parallelism.tensor_parallel",
            "context_parallel_size": "parallelism.context_parallel",
            "expert_parallel_size": "parallelism.expert_parallel"}
_FP8_GATHER = "fp8_enable_fsdp_float8_all_gather"
# Sizes of parallelisms the spec cannot say, with the feature each names.
_REFUSED_SIZES = {
    "sequence_parallel_degree": "sequence parallelism",
    "pipeline_parallel_size": "pipeline parallelism",
}
# Switches the spec cannot say, refused when on.
_REFUSED_SWITCHES = {
    "activation_offloading": "activation offloading to the CPU",
    "load_in_8bit": "an 8-bit quantized base model",
    "load_in_4bit": "a 4-bit quantized base model",  # but under QLoRA (adapters)
    "gptq": "a GPTQ-quantized base model",
}
# Objectives and models the engine does not train (it trains a causal LM's next-token
# loss, or DPO's: axolotl_dpo), refused when set: each is another trainer of axolotl's
# (TRL's for `rl`).
_REFUSED_OBJECTIVES = {
    "rl": "a preference or RL objective, TRL's trainer for it; the engine trains "
          "next-token loss and DPO",
    "reward_model": "a reward model, a sequence-classification head; the engine trains a "
                    "causal LM",
    "process_reward_model": "a process reward model, a token-classification head; the "
                            "engine trains a causal LM",
    "qat": "quantization-aware training, fake-quantized weights; the engine trains the "
           "weights unquantized",
    "use_onebitllms": "a 1-bit (BitNet) model, ternary weights; the engine trains the "
                      "weights unquantized",
}
_ATTENTION = {"sdpa": "sdpa", "eager": "eager", "flash_attention_2": "flash_attention_2"}
# axolotl's older boolean attention flags, in its priority order, and the
# attn_implementation each stands for (axolotl's LEGACY_ATTN_FLAG_TO_IMPL).
_ATTENTION_FLAGS = {"xformers_attention": "xformers", "sage_attention": "sage",
                    "flex_attention": "flex_attention", "flash_attention": "flash_attention_2",
                    "sdp_attention": "sdpa", "eager_attention": "eager"}
# axolotl dataset types that are one of the spec's data formats.
_DATASET_FORMATS = {"chat_template": "chat", "completion": "text"}
# Keys that change nothing the spec holds (logging destinations, prepared-data caches).
_NO_BEARING = frozenset({
    "strict", "dataset_prepared_path", "model_type", "tokenizer_type", "wandb_project",
    "wandb_entity", "wandb_watch", "wandb_name", "wandb_log_model", "trackio_project_name",
    "trackio_run_name", "trackio_space_id", "resume_from_checkpoint",
})
_HANDLED = frozenset({"base_model", "fsdp", "fsdp_config", "fsdp_version", "sequence_len",
                      "dp_shard_size", "dp_replicate_size", "datasets",
                      "attn_implementation", "fp8", _FP8_GATHER, *_ATTENTION_FLAGS,
                      *_DEGREES, *_REFUSED_SIZES,
                      *_REFUSED_SWITCHES, *_REFUSED_OBJECTIVES,
                      *axolotl_lora.KEYS, *axolotl_dpo.KEYS})


def _entries(document: Document) -> dict[str, Entry]:
    return {key: Entry(value, document.line(join("", key)), key)
            for key, value in document.data.items()}


def _refusals(entries: dict[str, Entry], draft: Draft) -> None:
    for key in (*_DEGREES, *_REFUSED_SIZES):
        entry = entries.get(key)
        if entry is None or entry.value is None:
            continue
        if isinstance(entry.value, bool) or not isinstance(entry.value, int) or not (
                1 <= entry.value <= 2**20):
            draft.refusals.append(Note(entry.line, f"FS052 {key} {entry.value!r} is not a size"))
        elif key in _DEGREES and entry.value > 1:
            draft.carry(_DEGREES[key], entry.value, entry)
        elif entry.value > 1:
            feature = _REFUSED_SIZES[key]
            draft.refuse(entry.line, f"{key} {entry.value} ({feature}, {entry.value}-way)")
    qlora = axolotl_lora.truthy(entries.get("adapter")) and entries["adapter"].value == "qlora"
    for key, feature in _REFUSED_SWITCHES.items():
        entry = entries.get(key)
        if key == "load_in_4bit" and qlora:
            continue  # QLoRA's base: peft.quantization
        if entry is not None and entry.value not in (None, False):
            draft.refuse(entry.line, f"{key} {entry.value} ({feature})")
    for key, feature in _REFUSED_OBJECTIVES.items():
        entry = entries.get(key)
        if entry is None or entry.value in (None, False, {}) or (
                key == "rl" and axolotl_dpo.is_dpo(entries)):
            continue
        shown = f"{key} {entry.value}" if isinstance(entry.value, (str, int, float)) else key
        if key == "rl":
            feature = f"{str(entry.value).upper()} training, {feature}"
        draft.refuse(entry.line, f"{shown} ({feature})")


def _fsdp_config(document: Document, entries: dict[str, Entry]) -> dict[str, Entry]:
    config = positioned_config(document)
    if "fsdp_version" in entries:
        config["fsdp_version"] = entries["fsdp_version"]
    return config


def _layout(entries: dict[str, Entry], reading: Any, draft: Draft,
            assumed: Assumptions) -> None:
    """dp_replicate_size × dp_shard_size is the process count and, with more than one
    replica, hybrid sharding over dp_shard_size ranks."""
    shard, replicate = (entries.get(k) for k in ("dp_shard_size", "dp_replicate_size"))
    shard, replicate = (e if e is not None and e.value is not None else None
                        for e in (shard, replicate))
    sizes = [e for e in (replicate, shard) if e is not None]
    bad = [e for e in sizes if isinstance(e.value, bool) or not isinstance(e.value, int)
           or not 1 <= e.value <= 2**20]
    if bad:
        raise ImportRefused([Note(e.line, f"FS052 {e.written} {e.value!r} is not a size")
                             for e in bad])
    draft.put("resources.nodes", 1, "assumed: axolotl configs do not say")
    expert = draft.has("parallelism.expert_parallel")
    if shard is None and not expert:  # axolotl shards over the devices the other sizes leave
        draft.put("resources.gpus_per_node", assumed.gpus_per_node,
                  "assumed (axolotl configs do not say): --gpus-per-node")
    else:
        # Under expert parallelism axolotl's ExpertParallelPlugin stops unless
        # expert_parallel_size × dp_shard_size (1 when unset) × tensor × context sizes is
        # the world size.
        degrees = [e for e in (entries.get(k) for k in _DEGREES)
                   if e is not None and draft.has(_DEGREES[e.written])]
        total = 1
        for entry in (*sizes, *degrees):
            total *= entry.value
        draft.put("resources.gpus_per_node", total, " × ".join(
            f"{e.written} {e.value} (line {e.line})" for e in (*sizes, *degrees)))
    if expert:
        _expert_layout(entries["expert_parallel_size"], shard, draft)
    if replicate is not None and replicate.value > 1:
        group = shard.value if shard is not None else 1
        resharded = reading.values.get("fsdp_reshard_after_forward", "FULL_SHARD")
        draft.put("fsdp.sharding_strategy",
                  "HYBRID_SHARD" if resharded == "FULL_SHARD" else "HYBRID_SHARD_ZERO2",
                  f"{replicate.written} {replicate.value} replicas (line {replicate.line})")
        draft.put("fsdp.shard_group_size", group, f"{group}-rank shard groups")


def _expert_layout(expert: Entry, shard: Entry | None, draft: Draft) -> None:
    """axolotl lays out expert_parallel_size × dp_shard_size ranks: each expert on the
    first, FSDP over the second, as torchtitan's efsdp (the spec's layout); the other
    weights it shards over dp_shard_size ranks only and replicates over the expert-parallel
    ones, where fsdpspec's engine shards them over every rank (less memory, the same
    training): a note says so."""
    group = shard.value if shard is not None else 1
    world = draft.value("resources.gpus_per_node")
    sharded = "" if group == 1 else f"shards over dp_shard_size {group} ranks and "
    draft.note(expert, f"{expert.written} {expert.value}: the weights other than the "
               f"experts, which axolotl {sharded}replicates over the {expert.value} "
               f"expert-parallel ranks, fsdpspec's engine shards over all {world} ranks "
               "(torchtitan's layout: the same training, less memory per rank)")


def _float8(entries: dict[str, Entry], draft: Draft) -> None:
    """`fp8: true` is torchao's tensorwise float8 through accelerate, which keeps the first
    and last linear layers in high precision; the all-gather is off unless
    fp8_enable_fsdp_float8_all_gather says otherwise."""
    enabled = entries.get("fp8")
    gather = entries.get(_FP8_GATHER)
    try:
        if enabled is None or not boolean(enabled.value):
            return
        all_gather = Value(boolean(gather.value), gather) if gather is not None and \
            gather.value is not None else Value(False, says=f"axolotl's default: {_FP8_GATHER} "
                                                "not given")
    except NotCarried as exc:
        bad = gather if enabled is not None and isinstance(enabled.value, bool) else enabled
        draft.refusals.append(Note(bad.line, f"FS052 {bad.written}: {exc}"))
        return
    draft.carry("fsdp.mixed_precision", "bf16", enabled,
                ": accelerate runs FSDP in bf16 around the float8 matmuls")
    apply_float8(draft, enabled=enabled,
                 recipe=Value("tensorwise", says=f"from fp8 (line {enabled.line}): "
                              "axolotl's recipe, torchao's tensorwise scaling"),
                 exclude=ACCELERATE_EXCLUDE,
                 all_gather=all_gather)
    keeps_first_linear(draft, enabled)


def _datasets(entries: dict[str, Entry], draft: Draft, base_dir: Path) -> None:
    """A first dataset of a type the spec reads becomes `data` when it is on this
    machine, or under DPO (whose objective needs preference data) where it names it;
    the others, and one that is not here, are notes."""
    from fsdpspec.catalog.hub import cached_snapshot, parse_hub_id

    entry = entries.get("datasets")
    if entry is None or entry.value is None:
        return
    if not isinstance(entry.value, list):
        draft.note(entry, "datasets: not a list of datasets; not imported")
        return
    dpo = axolotl_dpo.is_dpo(entries)
    for index, item in enumerate(entry.value):
        kind = item.get("type") if isinstance(item, dict) else None
        path = item.get("path") if isinstance(item, dict) else None
        if index == 0 and dpo and axolotl_dpo.refused_type(kind, entry.line, draft):
            continue  # DPO has no data without it
        if dpo:
            data_format = "preference" if index == 0 else None
        else:
            data_format = _DATASET_FORMATS.get(kind) if isinstance(kind, str) else None
        where = f"datasets[{index}] {path} (type {kind})"
        if index > 0 or data_format is None or not isinstance(path, str):
            reason = "the spec trains on one dataset" if index > 0 else \
                "not a format the spec reads (text, chat, prompt_completion)"
            draft.note(entry, f"{where}: {reason}; not imported")
            continue
        hub = parse_hub_id(path, "dataset")
        here = named_file_exists(base_dir / path) or (hub is not None and cached_snapshot(hub))
        if not here and dpo:
            draft.note(entry, f"{where}: not on this machine or in the Hugging Face cache: "
                       "fetch it, or --set data.path to a local preference file")
        elif not here:
            draft.note(entry, f"{where}: data.source dataset, format {data_format}, but it "
                       "is not on this machine or in the Hugging Face cache; not imported "
                       "(fetch it, then set data)")
            continue
        draft.carry("data.source", "dataset", entry)
        draft.carry("data.path", path, entry)
        draft.carry("data.format", data_format, entry)
        if dpo:
            axolotl_dpo.preference_fields(item, entry, draft)
            continue
        field_name = item.get("field_messages" if data_format == "chat" else "field")
        if isinstance(field_name, str):
            target = "data.messages_field" if data_format == "chat" else "data.text_field"
            draft.carry(target, field_name, entry)


def _model_keys(entries: dict[str, Entry], draft: Draft) -> None:
    length = entries.get("sequence_len")
    if length is not None:
        try:
            draft.carry("data.seq_len", hftrain.as_int(length.value), length)
        except NotCarried as exc:
            draft.note(length, f"sequence_len: {exc}; not imported")
    attention = entries.get("attn_implementation")
    flag = next((entries[k] for k in _ATTENTION_FLAGS if axolotl_lora.truthy(entries.get(k))),
                None)
    if (attention is None or attention.value is None) and flag is not None:
        attention = Entry(_ATTENTION_FLAGS[flag.written], flag.line, flag.written)
    if attention is not None and isinstance(attention.value, str) and (
            attention.value in _ATTENTION):
        draft.carry("model.attention", _ATTENTION[attention.value], attention)
    elif attention is not None and attention.value is not None:
        draft.note(attention, f"{attention.written} ({attention.value}): the spec has sdpa, "
                   "eager and flash_attention_2; not imported")


def _rest(entries: dict[str, Entry], draft: Draft) -> None:
    for key, entry in entries.items():
        known = key in _HANDLED or key in _NO_BEARING
        if entry.value is None or known or _RENAMED.get(key, key) in hftrain.READ:
            continue
        draft.note(entry, f"{key}: no v1 field; not imported")


def _offloaded_checkpointing(args: dict[str, Entry], draft: Draft) -> None:
    """axolotl's `gradient_checkpointing: offload` recomputes every layer and keeps each
    layer's saved input in host memory (its CPU-offloaded checkpoint wrapper): full
    checkpointing with fsdp.activation_offload, which under it moves those inputs."""
    entry = args.get("gradient_checkpointing")
    if entry is None or not (isinstance(entry.value, str) and entry.value.lower() == "offload"):
        return
    del args["gradient_checkpointing"]
    draft.carry("fsdp.activation_checkpointing", "full", entry,
                ": every layer recomputed in backward")
    draft.carry("fsdp.activation_offload", True, entry,
                ": each layer's saved input held in host memory")


def import_config(path: Path, *, name: str, assumed: Assumptions,
                  base_dir: Path) -> Imported:
    """A commented v1 spec of the axolotl config at ``path``."""
    document = read_yaml(path)
    entries = _entries(document)
    draft = Draft()
    _refusals(entries, draft)
    args = {_RENAMED.get(k, k): e for k, e in entries.items()}
    config = _fsdp_config(document, entries)
    reading = read_keys(fsdp_entries(args, path, draft, config))
    if reading.malformed:
        raise ImportRefused(reading.malformed)
    draft.notes += reading.notes
    apply_fsdp(reading, draft)
    _layout(entries, reading, draft, assumed)
    world = draft.value("resources.gpus_per_node")
    _offloaded_checkpointing(args, draft)
    hftrain.apply_training(draft, args, world)
    _float8(entries, draft)  # over the precision keys: accelerate's fp8 runs FSDP in bf16
    targets = axolotl_lora.apply_adapter(entries, draft)
    axolotl_lora.qlora_under_fsdp2(draft)
    _model_keys(entries, draft)
    if axolotl_dpo.is_dpo(entries):
        axolotl_dpo.apply_dpo(entries, draft)
    _datasets(entries, draft, base_dir)
    _rest(entries, draft)
    layers = take_layers(reading, draft)
    return finish(draft, tool="axolotl", kind="axolotl", source=str(path), name=name,
                  model=entries.get("base_model"), layers=layers, assumed=assumed,
                  base_dir=base_dir, with_model=targets.resolve if targets else None)

