"""accelerate config files in and out: `fsdpspec import accelerate` and
`fsdpspec export accelerate`.

Both directions read the one vocabulary table, fsdpspec/convert/accelerate_vocab.py.
Import reads the config's keys (fsdpspec/convert/fsdpkeys.py), maps
`parallelism_config` to hybrid sharding and the tensor- and context-parallel degrees,
`mixed_precision: fp8` with torchao to the float8 section (fsdpspec/convert/float8.py),
and refuses by name what the spec cannot say; the importer core writes the commented
spec. Export writes the keys accelerate understands for the job's FSDP version, and
names what it could not say.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdpspec.convert import accelerate_vocab as vocab
from fsdpspec.convert.draft import Assumptions, Draft, Entry, ImportRefused, Note, origin
from fsdpspec.convert.float8 import ACCELERATE_EXCLUDE, Value, apply_float8, keeps_first_linear
from fsdpspec.convert.fsdpkeys import (
    FsdpReading,
    NotCarried,
    apply_fsdp,
    boolean,
    read_keys,
    take_layers,
)
from fsdpspec.convert.importer import Imported, finish
from fsdpspec.convert.sources import Document, SourceError, read_yaml
from fsdpspec.job.layout import layout
from fsdpspec.semantics import (
    DEFAULT_RDZV_PORT,
    HYBRID_STRATEGIES,
    fsdp1_option,
    reshards_after_forward,
)
from fsdpspec.spec.load import join
from fsdpspec.spec.v1 import JobSpec, MixedPrecision

_FSDP_CONFIG = "fsdp_config"
_PARALLELISM = "parallelism_config"
_FP8 = "fp8_config"
# parallelism_config sizes the spec says, and the field of each.
_DEGREES = {"tp_size": "parallelism.tensor_parallel", "cp_size": "parallelism.context_parallel"}
# parallelism_config sizes the spec cannot say yet, with the feature each one names.
_REFUSED_SIZES = {
    "sp_size": "sequence parallelism",
    "pp_size": "pipeline parallelism",
}
# Sizes accelerate does not have (its ParallelismConfig: dp_replicate, dp_shard, tp, cp
# and sp, in 1.16), with the spec field that says each: `accelerate launch` drops them, so
# they are not imported, but said. Expert parallelism comes to accelerate's users from
# transformers' `DistributedConfig(ep_size=…)` in the training script, not the config.
_UNKNOWN_SIZES = {"ep_size": "parallelism.expert_parallel"}


def _entries(document: Document) -> dict[str, Entry]:
    """Top-level keys and fsdp_config keys side by side, as accelerate reads them."""
    top = document.data
    entries = {key: Entry(value, document.line(join("", key)), key)
               for key, value in top.items() if key not in (_FSDP_CONFIG, _PARALLELISM)}
    if _fp8(document):
        entries.pop("mixed_precision")  # float8 over bf16: _float8 reads it
    if str(top.get("dynamo_backend")).lower() == "no":
        entries.pop("dynamo_backend")  # no compile: nothing to carry
    fsdp = top.get(_FSDP_CONFIG)
    if fsdp is not None and not isinstance(fsdp, dict):
        raise SourceError(f"{document.file}:{document.line('/' + _FSDP_CONFIG)}: "
                          "fsdp_config is not a mapping of fsdp_* keys")
    for key, value in (fsdp or {}).items():
        # accelerate launch prefixes an fsdp_config key that does not start with "fsdp"
        # (`offload_params` is fsdp_offload_params) and then obeys it.
        named = key if key.startswith("fsdp") else f"fsdp_{key}"
        entries[named] = Entry(value, document.line(join(f"/{_FSDP_CONFIG}", key)), key)
    return entries


def _parallelism(document: Document, reading: FsdpReading, draft: Draft) -> None:
    """dp_replicate_size replicas of dp_shard_size-rank groups are hybrid sharding, over
    the data-parallel ranks tp_size × cp_size leave; the other parallelisms are refused
    by name and size."""
    section = document.data.get(_PARALLELISM)
    if section is None:
        return
    if not isinstance(section, dict):
        raise SourceError(f"{document.file}:{document.line('/' + _PARALLELISM)}: "
                          "parallelism_config is not a mapping")
    sizes: dict[str, Entry] = {}
    for key, value in section.items():
        short = key.removeprefix("parallelism_config_")
        entry = Entry(value, document.line(join(f"/{_PARALLELISM}", key)), key)
        if short in (*_DEGREES, *_REFUSED_SIZES, "dp_replicate_size", "dp_shard_size"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ImportRefused([Note(entry.line, f"FS052 {key} is not a size")])
            if value < 1:  # accelerate's ParallelismConfig stops on it (ValueError)
                draft.refusals.append(Note(entry.line, f"FS052 {key} {value}: a size is at "
                                           "least 1 (accelerate stops on it)"))
            sizes[short] = entry
        elif short in _UNKNOWN_SIZES and value not in (None, False, 1):
            draft.notes.append(Note(entry.line, (
                f"{key} {value}: accelerate has no such size (`accelerate launch` drops it and "
                f"runs every expert on every rank); not imported: {_UNKNOWN_SIZES[short]} "
                "is the spec's")))
        elif value not in (None, False):
            draft.notes.append(Note(entry.line, f"{key}: no v1 field; not imported"))
    _mesh_fits(sizes, reading, draft)
    for short, feature in _REFUSED_SIZES.items():
        if short in sizes and sizes[short].value > 1:
            entry = sizes[short]
            draft.refuse(entry.line, f"{entry.written} {entry.value} ({feature}, "
                         f"{entry.value}-way)")
    for short, field in _DEGREES.items():
        if short in sizes and sizes[short].value > 1:
            draft.carry(field, sizes[short].value, sizes[short])
    replicate = sizes.get("dp_replicate_size")
    if replicate is not None and replicate.value > 1:
        shard = sizes.get("dp_shard_size")
        group = shard.value if shard is not None and shard.value > 0 else 1
        resharded = reading.values.get("fsdp_reshard_after_forward", "FULL_SHARD")
        hybrid = "HYBRID_SHARD" if resharded == "FULL_SHARD" else "HYBRID_SHARD_ZERO2"
        used = [e for e in (replicate, shard) if e is not None]
        draft.put("fsdp.sharding_strategy", hybrid,
                  f"{origin(*used)}: {replicate.value} replicas of {group}-rank shard groups")
        draft.put("fsdp.shard_group_size", group, origin(*used))


def _mesh_fits(sizes: dict[str, Entry], reading: FsdpReading, draft: Draft) -> None:
    """accelerate stops when the mesh sizes do not multiply to the process count (a
    product of 1 it takes as replicas over all of them; DeepSpeed's sequence
    parallelism, refused here, it does not check)."""
    processes = reading.values.get("num_processes")
    if "sp_size" in sizes and sizes["sp_size"].value > 1 or any(
            entry.value < 1 for entry in sizes.values()):  # refused by size already
        return
    total = 1
    for entry in sizes.values():
        total *= entry.value
    if processes is not None and sizes and total not in (1, processes):
        where = min((e for e in sizes.values()), key=lambda e: e.line or 0)
        draft.refusals.append(Note(where.line, (
            f"FS052 parallelism_config sizes multiply to {total} processes, not "
            f"num_processes {processes} (line {reading.entries['num_processes'].line}): "
            "accelerate stops on it")))


def _topology(reading: FsdpReading, draft: Draft) -> None:
    values, entries = reading.values, reading.entries
    machines = values.get("num_machines", 1)
    if "num_machines" in values:
        draft.carry("resources.nodes", machines, entries["num_machines"])
    else:
        draft.put("resources.nodes", 1, "accelerate's default: one machine")
    if "num_processes" in values:
        total = values["num_processes"]
        if machines and total % machines == 0 and total:
            draft.put("resources.gpus_per_node", total // machines,
                      f"num_processes {total} over {machines} machine(s) "
                      f"(line {entries['num_processes'].line})", entries["num_processes"])
        else:
            draft.notes.append(Note(entries["num_processes"].line, (
                f"num_processes {total} is not a multiple of num_machines {machines}: "
                "not imported")))
    if "main_process_ip" in values:
        port = values.get("main_process_port", DEFAULT_RDZV_PORT)
        used = [entries[k] for k in ("main_process_ip", "main_process_port") if k in entries]
        draft.put("launch.rdzv_endpoint", f"{values['main_process_ip']}:{port}", origin(*used),
                  used[0])


def _special(document: Document, draft: Draft) -> None:
    top = document.data
    kind = top.get("distributed_type")
    if kind is not None and kind != "FSDP":
        draft.notes.append(Note(document.line("/distributed_type"),
                                f"distributed_type is {kind}, not FSDP: imported as an FSDP job"))
    if str(top.get("use_cpu")).lower() == "true":
        draft.put("resources.accelerator", "cpu", "use_cpu: true")


def _fp8(document: Document) -> bool:
    return str(document.data.get("mixed_precision")).lower() == "fp8"


# fp8_config keys (accelerate launch prefixes `fp8_` where it is missing) that only its
# Transformer Engine and MS-AMP backends read.
_OTHER_BACKENDS = frozenset({"fp8_use_autocast_during_eval", "fp8_margin", "fp8_interval",
                             "fp8_format", "fp8_amax_history_len", "fp8_amax_compute_algo",
                             "fp8_override_linear_precision", "fp8_opt_level"})


def _float8(document: Document, draft: Draft) -> None:
    """`mixed_precision: fp8` with the torchao backend (`fp8_config.backend: AO`, which
    accelerate also picks when none is named and torchao is installed) is the float8
    section over bf16; Transformer Engine and MS-AMP are refused by name."""
    if not _fp8(document):
        return
    enabled = Entry("fp8", document.line("/mixed_precision"), "mixed_precision fp8")
    section = document.data.get(_FP8) or {}
    if not isinstance(section, dict):
        raise SourceError(f"{document.file}:{document.line('/' + _FP8)}: "
                          "fp8_config is not a mapping")
    keys = {(k if k.startswith("fp8_") else f"fp8_{k}"): Entry(
        v, document.line(join(f"/{_FP8}", k)), f"{_FP8}.{k}") for k, v in section.items()}
    backend = keys.pop("fp8_backend", None)
    name = str(backend.value).upper() if backend is not None else "AO"
    if name in ("TE", "MSAMP"):
        feature = {"TE": "Transformer Engine", "MSAMP": "MS-AMP"}[name]
        draft.refuse(backend.line, f"{backend.written} {backend.value} ({feature} float8; "
                     "the spec trains float8 with torchao, backend AO)")
        return
    if name != "AO":
        draft.refusals.append(Note(backend.line, f"FS052 {backend.written} "
                                   f"{backend.value!r} is not AO, TE or MSAMP"))
        return
    draft.carry("fsdp.mixed_precision", "bf16", enabled,
                ": accelerate runs FSDP in bf16 around the float8 matmuls")
    gather = keys.pop("fp8_enable_fsdp_float8_all_gather", None)
    try:
        all_gather = Value(boolean(gather.value), gather) if gather is not None else \
            Value(None, says="accelerate's default enable_fsdp_float8_all_gather true: on "
                  "where FSDP2 can gather in float8")
    except NotCarried as exc:
        draft.refusals.append(Note(gather.line, f"FS052 {gather.written}: {exc}"))
        return
    recipe = (f"{origin(backend)}: torchao's default recipe" if backend is not None else
              f"{origin(enabled)}: torchao's default recipe (accelerate picks torchao when "
              "installed)")
    apply_float8(draft, enabled=enabled, recipe=Value("tensorwise", says=recipe),
                 exclude=ACCELERATE_EXCLUDE,
                 all_gather=all_gather)
    keeps_first_linear(draft, enabled)
    for key, entry in keys.items():
        if key in _OTHER_BACKENDS:
            draft.note(entry, f"{entry.written}: read by accelerate's TE and MS-AMP backends "
                       "only; not imported")
        elif key == "fp8_pad_inner_dim" and str(entry.value).lower() != "false":
            continue  # padded or skipped, a layer _scaled_mm cannot take stays high precision
        elif entry.value is not None:
            draft.note(entry, f"{entry.written}: no v1 field; not imported")


def import_config(path: Path, *, name: str, assumed: Assumptions,
                  base_dir: Path) -> Imported:
    """A commented v1 spec equivalent to the accelerate config at ``path``."""
    document = read_yaml(path)
    reading = read_keys(_entries(document), ignore=frozenset({"use_cpu", "distributed_type"}))
    if reading.malformed:
        raise ImportRefused(reading.malformed)
    draft = Draft(notes=list(reading.notes))
    _special(document, draft)
    _float8(document, draft)
    _topology(reading, draft)
    apply_fsdp(reading, draft)
    _parallelism(document, reading, draft)
    layers = take_layers(reading, draft)
    return finish(draft, tool="accelerate", kind="accelerate", source=document.file,
                  name=name, model=None, layers=layers, assumed=assumed,
                  base_dir=base_dir)


# ---- export ---------------------------------------------------------------------------

def _reverse(table: dict) -> dict:
    reverse: dict = {}
    for key, value in table.items():
        reverse.setdefault(value, key)
    return reverse


def _precision(mp: MixedPrecision) -> tuple[str, list[str]]:
    """accelerate's one word for the dtypes; accelerate computes, reduces and keeps
    buffers in that one dtype, so anything else is named."""
    word = {"bfloat16": "bf16", "float16": "fp16", "float32": "no"}[mp.param_dtype]
    exact = {mp.param_dtype, "float32"} >= {mp.reduce_dtype, mp.buffer_dtype}
    note = [] if exact else [f"mixed_precision {mp.model_dump()} has no accelerate word; "
                             f"wrote {word}"]
    return word, note


def _fsdp_common(spec: JobSpec, layers: list[str]) -> dict[str, Any]:
    fsdp = spec.fsdp
    config: dict[str, Any] = {
        "fsdp_version": fsdp.version,
        "fsdp_auto_wrap_policy": _reverse(vocab.AUTO_WRAP_POLICY)[fsdp.auto_wrap_policy],
    }
    if fsdp.auto_wrap_policy == "transformer" and layers:
        config["fsdp_transformer_layer_cls_to_wrap"] = ",".join(layers)
    if fsdp.auto_wrap_policy == "size":
        config["fsdp_min_num_params"] = fsdp.min_num_params
    config.update({
        "fsdp_offload_params": fsdp.cpu_offload,
        "fsdp_state_dict_type": fsdp.state_dict_type,
        "fsdp_cpu_ram_efficient_loading": fsdp.cpu_ram_efficient_loading,
        "fsdp_activation_checkpointing": fsdp.activation_checkpointing != "none",
    })
    return config


def _fsdp1(spec: JobSpec) -> dict[str, Any]:
    fsdp = spec.fsdp
    return {
        "fsdp_sharding_strategy": fsdp.sharding_strategy,
        "fsdp_backward_prefetch": _reverse(vocab.BACKWARD_PREFETCH)[fsdp.backward_prefetch],
        "fsdp_forward_prefetch": fsdp.forward_prefetch,
        "fsdp_sync_module_states": fsdp.sync_module_states,
        "fsdp_use_orig_params": fsdp1_option(fsdp, "use_orig_params"),
        "fsdp_limit_all_gathers": fsdp1_option(fsdp, "limit_all_gathers"),
    }


def _fsdp2(spec: JobSpec) -> tuple[dict[str, Any], list[str]]:
    """FSDP2 keys (accelerate runs hybrid sharding from parallelism_config's sizes, not
    from a strategy name)."""
    strategy = spec.fsdp.sharding_strategy
    keys = {"fsdp_reshard_after_forward": reshards_after_forward(strategy)}
    if strategy == "NO_SHARD":
        return keys, ["fsdp.sharding_strategy NO_SHARD has no accelerate FSDP2 "
                      "equivalent; wrote fsdp_reshard_after_forward: true"]
    return keys, []


def _parallelism_config(spec: JobSpec) -> tuple[dict[str, int], list[str]]:
    """The mesh sizes accelerate builds its device mesh from: the data-parallel degrees
    of a hybrid layout, and the tensor- and context-parallel degrees with the
    data-parallel sizes they leave. FSDP1 has none (accelerate refuses the block)."""
    dims = layout(spec).dims
    if not (dims.tp_enabled or dims.cp_enabled) and \
            spec.fsdp.sharding_strategy not in HYBRID_STRATEGIES:
        return {}, []
    if spec.fsdp.version == 1:
        return {}, [f"{_degrees(spec)}: accelerate's parallelism_config needs FSDP2 "
                    "(fsdp.version: 2); not written"] if dims.tp_enabled or dims.cp_enabled \
            else []
    sizes = {"parallelism_config_dp_replicate_size": dims.dp_replicate,
             "parallelism_config_dp_shard_size": dims.dp_shard}
    notes = []
    if dims.tp_enabled or dims.cp_enabled:
        sizes.update(parallelism_config_tp_size=dims.tp, parallelism_config_cp_size=dims.cp)
        if dims.dp_replicate > 1 and dims.dp_shard == 1:
            notes.append(f"{_degrees(spec)} over replicas that shard nothing "
                         f"(fsdp.sharding_strategy {spec.fsdp.sharding_strategy}): accelerate "
                         "refuses tensor or context parallelism with pure data parallelism")
    return sizes, notes


def _degrees(spec: JobSpec) -> str:
    p = spec.parallelism
    return f"parallelism.tensor_parallel {p.tensor_parallel}, context_parallel " \
        f"{p.context_parallel}"


def _fp8_config(spec: JobSpec, fsdp_config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """accelerate's torchao float8 (`mixed_precision: fp8`, backend AO): its default
    config is tensorwise, it picks the layers (all but the first and last linear
    layer), and it stops on torchao with FSDP2 and cpu_ram_efficient_loading."""
    float8 = spec.float8
    assert float8 is not None
    config: dict[str, Any] = {"backend": "AO"}
    if float8.fsdp_all_gather is not None:
        config["enable_fsdp_float8_all_gather"] = float8.fsdp_all_gather
    notes = []
    if float8.recipe != "tensorwise":
        notes.append(f"float8.recipe {float8.recipe}: accelerate's config file runs torchao's "
                     "default recipe, tensorwise; wrote that")
    if float8.exclude != ["lm_head"]:
        notes.append(f"float8.exclude {float8.exclude}: accelerate keeps the first and last "
                     "linear layers in high precision; its config file cannot name others")
    if float8.skip_small:
        notes.append("float8.skip_small: accelerate leaves out only the layers _scaled_mm "
                     "cannot take; not written")
    if spec.fsdp.mixed_precision.param_dtype != "bfloat16":
        notes.append(f"fsdp.mixed_precision {spec.fsdp.mixed_precision.param_dtype}: accelerate "
                     "runs FSDP in bf16 under fp8")
    if spec.fsdp.version == 2 and fsdp_config.get("fsdp_cpu_ram_efficient_loading"):
        fsdp_config["fsdp_cpu_ram_efficient_loading"] = False
        notes.append("fsdp.cpu_ram_efficient_loading true: accelerate refuses it with torchao "
                     "float8 under FSDP2; wrote false (every rank reads the weights)")
    return config, notes


def _lossy_fsdp(spec: JobSpec) -> list[str]:
    notes = []
    if spec.fsdp.activation_checkpointing in ("selective", "op"):
        notes.append(f"fsdp.activation_checkpointing {spec.fsdp.activation_checkpointing}: "
                     "accelerate checkpoints every layer whole; wrote true")
    # The memory levers accelerate's config cannot say (its training loop is the user's).
    for name, value, default in (("train.loss_chunks", spec.train.loss_chunks, 1),
                                  ("fsdp.activation_offload", spec.fsdp.activation_offload, False),
                                  ("optimizer.state_dtype", spec.optimizer.state_dtype, "float32")):
        if value != default:
            notes.append(f"{name} {value}: not expressible in an accelerate config; dropped")
    return notes


def export_config(spec: JobSpec, layers: list[str]) -> tuple[dict[str, Any], list[str]]:
    """An accelerate config for the job, and the fields it could not express.
    ``layers`` are the wrapping classes (inferred from the model when the spec has none)."""
    fsdp_config = _fsdp_common(spec, layers)
    notes = _lossy_fsdp(spec)
    if spec.fsdp.version == 1:
        fsdp_config.update(_fsdp1(spec))
    else:
        extra, more = _fsdp2(spec)
        fsdp_config.update(extra)
        notes += more
    parallelism, more = _parallelism_config(spec)
    notes += more
    if spec.parallelism.expert_parallel > 1:
        # accelerate's ParallelismConfig has dp_replicate, dp_shard, tp and cp sizes only.
        notes.append(f"parallelism.expert_parallel {spec.parallelism.expert_parallel}: "
                     "accelerate's parallelism_config has no expert-parallel size; not "
                     "written (accelerate would run every expert on every rank)")
    if spec.float8 is not None:
        precision = "fp8"
        fp8, more = _fp8_config(spec, fsdp_config)
    else:
        fp8 = {}
        precision, more = _precision(spec.fsdp.mixed_precision)
    notes += more
    nodes = spec.resources.nodes
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "fsdp_config": dict(sorted(fsdp_config.items())),
        "machine_rank": 0,
        "mixed_precision": precision,
        "num_machines": nodes,
        "num_processes": spec.world_size,
        "rdzv_backend": "c10d" if nodes > 1 else "static",
        "same_network": True,
        "use_cpu": spec.resources.accelerator == "cpu",
    }
    if parallelism:
        config["parallelism_config"] = parallelism
    if fp8:
        config["fp8_config"] = fp8
    if nodes > 1 and spec.launch.rdzv_endpoint:
        host, port = spec.launch.rdzv_endpoint.rsplit(":", 1)
        config.update(main_process_ip=host, main_process_port=int(port))
    return dict(sorted(config.items())), notes
