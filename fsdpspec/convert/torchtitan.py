"""`fsdpspec import torchtitan CONFIG.toml`: a torchtitan training TOML (the schema
before its 2026 Python configs) as a v1 spec.

Both of its layouts are read: parallel degrees under `[training]` and `[experimental]`
(2024), or under `[parallelism]` (2025 on). torchtitan always shards with FSDP2; a
replicate degree above one is hybrid sharding over the shard degree, and −1 means "the
GPUs left". The tensor-, context- and expert-parallel degrees are the `parallelism`
degrees (expert tensor parallelism only at 1, torchtitan's default), and the float8
converter (`converters = ["float8"]` with its `[float8]` or `[quantize.linear.float8]`
table, or 2024's `enable_float8_linear`) is the float8 section
(fsdpspec/convert/float8.py). Pipeline and expert tensor parallelism and the other
converters are refused by name: the spec cannot say them yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdpspec.catalog.config_source import ModelConfigError, read_hf_config
from fsdpspec.convert import hftrain
from fsdpspec.convert.draft import Assumptions, Draft, Entry, ImportRefused, Note
from fsdpspec.convert.float8 import (
    RECIPES,
    SMALL_LAYERS,
    TORCHTITAN_NAMES,
    Value,
    apply_float8,
)
from fsdpspec.convert.fsdpkeys import NotCarried
from fsdpspec.convert.importer import Imported, finish
from fsdpspec.convert.sources import Document, read_toml
from fsdpspec.spec.load import join

# (model name, flavor) → the preset of the same geometry: the flavor tables of each
# model's `__init__.py` (pytorch/torchtitan 238fa9953e4a), debug flavors included.
_PRESETS = {
    ("llama2", "7B"): "llama2-7b", ("llama2", "13B"): "llama2-13b",
    ("llama2", "70B"): "llama2-70b", ("llama3", "8B"): "llama3-8b",
    ("llama3", "70B"): "llama3-70b", ("llama3", "405B"): "llama3.1-405b",
    ("qwen3", "0.6B"): "qwen3-0.6b", ("qwen3", "32B"): "qwen3-32b",
    ("qwen3", "30B-A3B"): "qwen3-30b-a3b", ("qwen3", "235B-A22B"): "qwen3-235b-a22b",
    ("qwen3", "debugmodel_moe"): "torchtitan-qwen3-moe-debug",
    ("gpt_oss", "20b"): "gpt-oss-20b", ("gpt_oss", "120b"): "gpt-oss-120b",
    ("gpt_oss", "debugmodel"): "torchtitan-gpt-oss-debug",
    ("deepseek_v3", "debugmodel"): "torchtitan-deepseek-v3-debug",
    ("llama4", "debugmodel"): "torchtitan-llama4-debug",
}
# What a preset's family computes differently from the flavor it stands for (the shape
# and the count are the flavor's): said beside the preset.
_DIFFERS = {"torchtitan-deepseek-v3-debug": (
    "torchtitan's router scores the experts by softmax (score_func); transformers' "
    "deepseek_v3 scores them by sigmoid with a correction bias, which is how the engine "
    "routes")}
# Degrees the spec says, and the field of each.
_DEGREES = {"tensor_parallel_degree": "parallelism.tensor_parallel",
            "context_parallel_degree": "parallelism.context_parallel",
            # torchtitan's layout, the spec's: experts split over ep of the dp_shard × cp ×
            # tp ranks, FSDP-sharded over the rest (efsdp); it adds no ranks to the world.
            "expert_parallel_degree": "parallelism.expert_parallel"}
# Degrees the spec cannot say, with the feature each names (and, after "; ", how to do
# without it).
_REFUSED_DEGREES = {
    "pipeline_parallel_degree": "pipeline parallelism",
    "expert_tensor_parallel_degree": "expert tensor parallelism; with 1, FSDP shards each "
                                     "rank's experts instead",
}
_DEGREE_TABLES = ("parallelism", "training", "experimental")
# The float8 converter's names (2025, 2026) and its table in each schema.
_FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")
_FLOAT8_TABLES = ("quantize.linear.float8", "float8")
_DTYPES = {"bfloat16", "float16", "float32"}
_SCHEDULES = {"linear": "linear", "cosine": "cosine"}


class _Toml:
    """The TOML's keys by (table, key), each an Entry naming `[table] key` and its line."""

    def __init__(self, document: Document):
        self.document = document
        self.used: set[tuple[str, str]] = set()

    def get(self, tables: tuple[str, ...] | str, key: str) -> Entry | None:
        for table in (tables,) if isinstance(tables, str) else tables:
            section = self._section(table)
            if isinstance(section, dict) and key in section:
                self.used.add((table, key))
                pointer = join("".join(f"/{p}" for p in table.split(".")), key)
                return Entry(section[key], self.document.line(pointer), f"[{table}] {key}")
        return None

    def _section(self, table: str) -> Any:
        node: Any = self.document.data
        for part in table.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def unread(self) -> list[Entry]:
        """Every scalar key the importer did not read, with its line."""
        found = []

        def walk(node: dict, table: str) -> None:
            for key, value in node.items():
                if isinstance(value, dict):
                    walk(value, f"{table}.{key}" if table else key)
                elif (table, key) not in self.used:
                    pointer = join("".join(f"/{p}" for p in table.split(".")), key)
                    found.append(Entry(value, self.document.line(pointer), f"[{table}] {key}"))
        walk(self.document.data, "")
        return found


def _degree(toml: _Toml, key: str) -> Entry | None:
    return toml.get(_DEGREE_TABLES, key)


def _refusals(toml: _Toml, draft: Draft) -> None:
    for key in (*_DEGREES, *_REFUSED_DEGREES):
        entry = _degree(toml, key)
        if entry is None:
            continue
        if isinstance(entry.value, bool) or not isinstance(entry.value, int) or not (
                1 <= entry.value <= 2**20):
            draft.refusals.append(Note(entry.line, f"FS052 {entry.written} "
                                       f"{entry.value!r} is not a degree"))
        elif key in _DEGREES and entry.value > 1:
            draft.carry(_DEGREES[key], entry.value, entry)
        elif entry.value > 1:
            feature, _, fix = _REFUSED_DEGREES[key].partition("; ")
            draft.refuse(entry.line, f"{entry.written} {entry.value} ({feature}, "
                         f"{entry.value}-way{'; ' + fix if fix else ''})")
    converters = toml.get("model", "converters")
    names = converters.value if converters is not None else []
    for name in names if isinstance(names, list) else [names]:
        if name not in _FLOAT8_CONVERTERS:
            draft.refuse(converters.line, f"{converters.written} {name} ({name} training)")
    for key in ("async_tp", "enable_async_tensor_parallel"):
        entry = _degree(toml, key)
        if entry is not None and entry.value is True and draft.value(
                "parallelism.tensor_parallel", 1) > 1:
            draft.note(entry, f"{entry.written}: fsdpspec's engine runs tensor parallelism's "
                       "collectives without micro-pipelining them (the plan counts them as "
                       "such); not imported")
    _degree(toml, "pipeline_parallel_schedule")  # only meaningful with pipeline parallelism


def _float8_on(toml: _Toml) -> Entry | None:
    """What turns the float8 converter on: a float8 name in `[model] converters`, or
    2024's `[float8] enable_float8_linear`."""
    converters = toml.get("model", "converters")
    names = converters.value if converters is not None else []
    if any(name in _FLOAT8_CONVERTERS for name in (names if isinstance(names, list)
                                                    else [names])):
        return converters
    switch = toml.get("float8", "enable_float8_linear")
    return switch if switch is not None and switch.value is True else None


def _float8(toml: _Toml, draft: Draft) -> None:
    """The float8 section: torchtitan's recipe (tensorwise when none is named), its
    filter_fqns as the Hugging Face names the engine trains, and its all-gather (off by
    default). Its table is read only when float8 is on: otherwise it says nothing."""
    enabled = _float8_on(toml)
    if enabled is None:
        return
    recipe = toml.get(_FLOAT8_TABLES, "recipe_name")
    if recipe is not None and recipe.value is not None and recipe.value not in RECIPES:
        draft.refuse(recipe.line, f"{recipe.written} {recipe.value} (a float8 recipe the spec "
                     f"lacks; it has {', '.join(RECIPES)})")
        return
    for key in ("scaling_type_input", "scaling_type_weight", "scaling_type_grad_output"):
        scaling = toml.get("float8", key)  # 2024: delayed scaling, which torchao removed
        if scaling is not None and scaling.value not in (None, "dynamic"):
            draft.refuse(scaling.line, f"{scaling.written} {scaling.value} (delayed float8 "
                         "scaling; the spec scales dynamically)")
            return
    gather = toml.get(_FLOAT8_TABLES, "enable_fsdp_float8_all_gather")
    if gather is not None and not isinstance(gather.value, bool):
        draft.refusals.append(Note(gather.line, f"FS052 {gather.written} {gather.value!r} "
                                   "is not a boolean"))
        return
    exclude, small = _filter_fqns(toml, draft)
    apply_float8(
        draft, enabled=enabled, exclude=exclude, skip_small=small,
        recipe=Value(recipe.value, recipe) if recipe is not None and recipe.value else Value(
            "tensorwise", says=f"from {enabled.written} (line {enabled.line}): torchtitan's "
            "default recipe, tensorwise"),
        all_gather=Value(gather.value, gather) if gather is not None else Value(
            False, says="torchtitan's default: enable_fsdp_float8_all_gather false"))


def _filter_fqns(toml: _Toml, draft: Draft) -> tuple[Value, Value | None]:
    """torchtitan's module names as the ends of the Hugging Face paths `float8.exclude`
    matches (a name fsdpspec cannot translate is a note), and its word for torchao's
    small-layer filter as `float8.skip_small`."""
    entry = toml.get(_FLOAT8_TABLES, "filter_fqns")
    if entry is None:
        return Value([], says="torchtitan's default filter_fqns: every linear layer"), None
    names = entry.value.split(",") if isinstance(entry.value, str) else entry.value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        draft.note(entry, f"{entry.written} {entry.value!r}: not a list of module names; "
                   "not imported")
        return Value([], entry), None
    names = [n.strip() for n in names]
    kept = [TORCHTITAN_NAMES[n] for n in names if n in TORCHTITAN_NAMES]
    unknown = [n for n in names if n not in TORCHTITAN_NAMES and n != SMALL_LAYERS]
    if unknown:
        draft.note(entry, f"{entry.written} {unknown}: not torchtitan module names fsdpspec "
                   f"knows ({', '.join(TORCHTITAN_NAMES)}); not imported")
    small = Value(True, entry, f"{SMALL_LAYERS}, torchao's small-layer filter") \
        if SMALL_LAYERS in names else None
    return Value(kept, entry, "torchtitan's module names as the Hugging Face ones"), small


def _checkpointing(toml: _Toml, draft: Draft) -> None:
    mode = toml.get("activation_checkpoint", "mode")
    if mode is None:
        return
    if isinstance(mode.value, str) and mode.value in ("none", "full"):
        draft.carry("fsdp.activation_checkpointing", mode.value, mode)
        toml.get("activation_checkpoint", "selective_ac_option")  # read only when selective
        return
    if mode.value == "memory_budget":
        draft.refuse(mode.line, f"{mode.written} memory_budget (recomputation chosen by the "
                     "compiler for a memory budget)")
        return
    if mode.value != "selective":
        draft.note(mode, f"{mode.written} {mode.value!r}: not none, selective or full; "
                   "not imported")
        return
    option = toml.get("activation_checkpoint", "selective_ac_option")
    value = str(option.value) if option is not None else "2"
    if value.isdigit() and value.isascii() and len(value) < 10:
        # torchtitan checkpoints every layer for "0" (`not ac_freq`), as ac_every 1 does.
        draft.carry("fsdp.activation_checkpointing", "selective", mode)
        draft.carry("fsdp.ac_every", int(value) or 1, option or mode)
    elif value == "op":
        # The engine's op mode is torchtitan's policy (docs/import.md says where the
        # save lists differ); forced recomputes other than its MoE-router default are not.
        draft.carry("fsdp.activation_checkpointing", "op", option,
                    ": op-level selective checkpointing, torchtitan's policy")
        forced = toml.get("activation_checkpoint",
                          "per_op_sac_force_recompute_mm_shapes_by_fqns")
        if forced is not None and forced.value not in ([], ["moe.router.gate"]):
            draft.refuse(forced.line, f"{forced.written} {forced.value} (matrix multiplies "
                         "forced to be recomputed under op-level checkpointing)")
    else:  # torchtitan stops on it (ValueError)
        draft.refusals.append(Note(option.line, f"FS052 {option.written} {value!r} is not "
                                   "'op' or a number of layers"))


def _layout(toml: _Toml, draft: Draft, assumed: Assumptions) -> None:
    """World, strategy and shard group from the two data-parallel degrees."""
    shard, replicate = _degree(toml, "data_parallel_shard_degree"), \
        _degree(toml, "data_parallel_replicate_degree")
    shard_n = shard.value if shard is not None else -1
    replicate_n = replicate.value if replicate is not None else 1
    if (isinstance(shard_n, bool) or isinstance(replicate_n, bool) or not isinstance(shard_n, int)
            or not isinstance(replicate_n, int) or replicate_n < 1
            or not (shard_n == -1 or 1 <= shard_n <= 2**20) or replicate_n > 2**20):
        where = (shard or replicate).line if (shard or replicate) else None
        raise ImportRefused([Note(where, "FS052 the data parallel degrees are not whole "
                                  "numbers (data_parallel_shard_degree: -1 or above 0)")])
    draft.put("resources.nodes", 1, "assumed: torchtitan configs do not say")
    others = draft.value("parallelism.tensor_parallel", 1) * \
        draft.value("parallelism.context_parallel", 1)
    if shard_n == -1:
        world = assumed.gpus_per_node
        draft.put("resources.gpus_per_node", world,
                  "assumed (torchtitan configs do not say; run_train.sh's NGPU): "
                  "--gpus-per-node")
        shard_n = max(world // (replicate_n * others), 1)
    else:
        world = shard_n * replicate_n * others
        degrees = " × tensor × context parallel degrees" if others > 1 else ""
        draft.put("resources.gpus_per_node", world, "data_parallel_shard_degree × "
                  f"data_parallel_replicate_degree{degrees} (line {shard.line})")
    draft.put("fsdp.version", 2, "torchtitan shards with FSDP2 (fully_shard)")
    reshard = toml.get("parallelism", "fsdp_reshard_after_forward")
    keeps = reshard is not None and reshard.value == "never"
    if reshard is not None and reshard.value not in ("default", "always", "never"):
        draft.note(reshard, f"{reshard.written} {reshard.value!r}: not default, always or "
                   "never; not imported")
    if replicate_n > 1 and shard_n > 1:
        draft.carry("fsdp.sharding_strategy",
                    "HYBRID_SHARD_ZERO2" if keeps else "HYBRID_SHARD", replicate,
                    f": {replicate_n} replicas of {shard_n}-rank shard groups")
        draft.put("fsdp.shard_group_size", shard_n,
                  f"from {shard.written} (line {shard.line})" if shard else "the GPUs left")
    elif replicate_n > 1:
        draft.carry("fsdp.sharding_strategy", "NO_SHARD", replicate, ": replicated (DDP)")
    elif keeps:
        draft.carry("fsdp.sharding_strategy", "SHARD_GRAD_OP", reshard)


def _precision(toml: _Toml, draft: Draft) -> None:
    param = toml.get(("training",), "mixed_precision_param")
    reduce = toml.get(("training",), "mixed_precision_reduce")
    # torchtitan's defaults: parameters in bfloat16, gradients reduced in float32.
    param_dtype = param.value if param else "bfloat16"
    reduce_dtype = reduce.value if reduce else "float32"
    if not all(isinstance(d, str) and d in _DTYPES for d in (param_dtype, reduce_dtype)):
        draft.notes.append(Note((param or reduce).line, "mixed precision dtypes "
                                f"{param_dtype}/{reduce_dtype}: not imported"))
        return
    given = [e for e in (param, reduce) if e is not None]
    comment = ("from " + ", ".join(f"{e.written} (line {e.line})" for e in given)) if given \
        else "torchtitan's default: bfloat16 parameters, float32 reduction"
    # FSDP2 leaves buffers as they are (buffer_dtype is FSDP1's, FS901).
    draft.put("fsdp.mixed_precision", {"param_dtype": param_dtype, "reduce_dtype": reduce_dtype},
              comment)


def _training(toml: _Toml, draft: Draft) -> None:
    batch = toml.get("training", "local_batch_size") or toml.get("training", "batch_size")
    try:
        micro = hftrain.as_int(batch.value) if batch is not None else 8
    except NotCarried as exc:
        draft.note(batch, f"{batch.written}: {exc}; not imported")
        batch, micro = None, 8
    draft.put("data.micro_batch_size", micro, f"from {batch.written} (line {batch.line})"
              if batch else "torchtitan's default local batch", batch)
    data_parallel = draft.data_parallel_ranks(draft.value("resources.gpus_per_node"))
    global_batch = toml.get("training", "global_batch_size")
    if global_batch is not None and isinstance(global_batch.value, int) and global_batch.value > 0:
        draft.carry("data.global_batch_size", global_batch.value, global_batch)
    else:
        if global_batch is not None and global_batch.value != -1:
            draft.note(global_batch, f"{global_batch.written} {global_batch.value!r}: not a "
                       "batch size; not imported")
        draft.put("data.global_batch_size", micro * data_parallel,
                  f"{micro} per rank × {data_parallel} data-parallel ranks, no accumulation",
                  batch)
    simple = {
        ("training", "seq_len"): ("data.seq_len", hftrain.as_int),
        ("training", "steps"): ("train.max_steps", hftrain.as_int),
        ("training", "max_norm"): ("optimizer.grad_clip_norm", hftrain.as_float),
        ("training", "seed"): ("train.seed", hftrain.as_int),
        ("training", "compile"): ("train.compile", hftrain.as_bool),
        ("training", "enable_cpu_offload"): ("fsdp.cpu_offload", hftrain.as_bool),
        ("compile", "enable"): ("train.compile", hftrain.as_bool),
        ("optimizer", "lr"): ("optimizer.lr", hftrain.as_float),
        ("optimizer", "eps"): ("optimizer.eps", hftrain.as_float),
        ("optimizer", "weight_decay"): ("optimizer.weight_decay", hftrain.as_float),
        ("lr_scheduler", "warmup_steps"): ("optimizer.scheduler.warmup_steps", hftrain.as_int),
        ("training", "warmup_steps"): ("optimizer.scheduler.warmup_steps", hftrain.as_int),
        ("lr_scheduler", "min_lr_factor"): ("optimizer.scheduler.min_lr_ratio",
                                            hftrain.as_float),
        ("metrics", "log_freq"): ("logging.interval_steps", hftrain.as_int),
        ("metrics", "enable_tensorboard"): ("logging.tensorboard", hftrain.as_bool),
        ("job", "description"): ("metadata.description", str),
    }
    for (table, key), (target, convert) in simple.items():
        entry = toml.get(table, key)
        if entry is not None:
            try:
                draft.carry(target, convert(entry.value), entry)
            except NotCarried as exc:
                draft.note(entry, f"{entry.written}: {exc}; not imported")


def _optimizer(toml: _Toml, draft: Draft) -> None:
    name = toml.get("optimizer", "name")
    if name is not None and str(name.value).lower() != "adamw":
        draft.refuse(name.line, f"{name.written} {name.value} (an optimizer the spec lacks; "
                     "it has adamw and sgd)")
        return
    draft.put("optimizer.name", "adamw", f"from {name.written} (line {name.line})" if name
              else "torchtitan's default AdamW")
    # torchtitan's AdamW defaults where the spec's differ.
    if not draft.has("optimizer.weight_decay"):
        draft.put("optimizer.weight_decay", 0.1, "torchtitan's default weight_decay")
    draft.put("optimizer.betas", [0.9, 0.95], "torchtitan's AdamW betas")
    decay = toml.get("lr_scheduler", "decay_type")
    schedule = str(decay.value) if decay is not None else "linear"
    if schedule in _SCHEDULES:
        draft.put("optimizer.scheduler.name", _SCHEDULES[schedule],
                  f"from {decay.written} (line {decay.line})" if decay
                  else "torchtitan's default: linear decay after warmup")
    else:
        draft.note(decay, f"{decay.written} {schedule}: the spec decays linearly or by cosine; "
                   "imported as linear")
        draft.put("optimizer.scheduler.name", "linear", f"{schedule} is not in the spec")
    if not draft.has("optimizer.scheduler.min_lr_ratio"):
        draft.put("optimizer.scheduler.min_lr_ratio", 0.0, "torchtitan decays to 0 by default")
    ratio = toml.get("lr_scheduler", "decay_ratio")
    if ratio is not None and ratio.value is not None:
        draft.note(ratio, f"{ratio.written} {ratio.value}: a stable phase before the decay, "
                   "which the spec's schedules lack; decays right after warmup")


def _checkpoint(toml: _Toml, draft: Draft) -> None:
    enabled = toml.get("checkpoint", "enable") or toml.get("checkpoint", "enable_checkpoint")
    if enabled is not None and enabled.value is False:
        draft.carry("checkpoint.interval_steps", 0, enabled, ": saves only when stopped")
        toml.get("checkpoint", "interval")  # no saves: its interval says nothing
    else:
        interval = toml.get("checkpoint", "interval")
        if interval is not None:
            draft.carry("checkpoint.interval_steps", interval.value, interval)
    keep = toml.get("checkpoint", "keep_latest_k")
    if keep is not None and isinstance(keep.value, int) and not isinstance(keep.value, bool):
        draft.carry("checkpoint.keep_last", keep.value, keep)
    elif keep is not None:
        draft.note(keep, f"{keep.written} {keep.value!r}: not a count; not imported")
    dtype = toml.get("checkpoint", "export_dtype")
    if dtype is not None and isinstance(dtype.value, str) and dtype.value in _DTYPES:
        draft.carry("checkpoint.final.dtype", dtype.value, dtype)
    elif dtype is not None:
        draft.note(dtype, f"{dtype.written} {dtype.value!r}: not a dtype the spec exports "
                   "(bfloat16, float16, float32); not imported")
    toml.get("checkpoint", "interval_type")


def _model(toml: _Toml, draft: Draft, base_dir: Path) -> Entry | None:
    """The model: the preset of ``[model] name`` and ``flavor`` (torchtitan's tables of
    shapes), with a note where the preset routes otherwise than the flavor, else the
    config in ``hf_assets_path`` where that folder holds one, else the name and flavor
    for the importer core to resolve by family or stop on."""
    name, flavor = toml.get("model", "name"), toml.get("model", "flavor")
    assets = toml.get("model", "hf_assets_path")
    if name is None:
        return None
    label = f"{name.value} {flavor.value}" if flavor else str(name.value)
    preset = _PRESETS.get((str(name.value), str(flavor.value) if flavor else ""))
    if preset is not None:
        if preset not in _DIFFERS:
            return Entry(preset, flavor.line if flavor else name.line, f"[model] {label}")
        model = Entry(preset, flavor.line if flavor else name.line,
                      f"[model] {label}, whose routing differs (see the note)")
        draft.note(model, f"[model] {label}: {_DIFFERS[preset]}")
        return model
    if assets is not None and isinstance(assets.value, str):
        try:
            read_hf_config(assets.value, base_dir)
            return assets
        except (ModelConfigError, OSError, ValueError):
            pass  # a tokenizer folder: the name and flavor say the model
    return Entry(label, name.line, "[model] name and flavor")


# Keys that change nothing the spec holds (profiling, output folders, metrics colours).
_NO_BEARING_TABLES = {"profiling", "job", "comm", "memory_estimation", "fault_tolerance"}
# Tables of converters that are off unless `converters` names them.
_CONVERTER_TABLES = ("float8", "quantize")


def import_config(path: Path, *, name: str, assumed: Assumptions,
                  base_dir: Path) -> Imported:
    """A commented v1 spec of the torchtitan TOML at ``path``."""
    toml = _Toml(read_toml(path))
    draft = Draft()
    _refusals(toml, draft)
    _float8(toml, draft)
    _checkpointing(toml, draft)
    _layout(toml, draft, assumed)
    model = _model(toml, draft, base_dir)
    if draft.refusals:
        return finish(draft, tool="torchtitan", kind="torchtitan", source=str(path),
                      name=name, model=model, layers=None, assumed=assumed,
                      base_dir=base_dir)
    _precision(toml, draft)
    _training(toml, draft)
    _optimizer(toml, draft)
    _checkpoint(toml, draft)
    for entry in toml.unread():
        table = entry.written[1:].split("]")[0].split(".")[0]
        silent = table in _NO_BEARING_TABLES or (
            table in _CONVERTER_TABLES and not draft.has("float8.recipe"))
        if not silent and entry.value not in (None, False, "", [], "disabled"):
            draft.note(entry, f"{entry.written}: no v1 field; not imported")
    return finish(draft, tool="torchtitan", kind="torchtitan", source=str(path), name=name,
                  model=model, layers=None, assumed=assumed, base_dir=base_dir)
