"""accelerate config files in and out: `fsdpspec import accelerate` and
`fsdpspec export accelerate`.

Both directions read the one vocabulary table, fsdpspec/convert/accelerate_vocab.py. Import
writes a commented v1 spec (each value says which accelerate key it came from) and
reports, with its line, every key it did not carry over. Export writes the keys
accelerate understands for the job's FSDP version, and names what it could not say.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from fsdpspec.convert import accelerate_vocab as vocab
from fsdpspec.semantics import DEFAULT_RDZV_PORT, fsdp1_option
from fsdpspec.spec.load import Loaded, join
from fsdpspec.spec.suggest import closest
from fsdpspec.spec.v1 import JobSpec, MixedPrecision
from fsdpspec.spec.yamltext import COMMENT_COLUMN, dump_yaml

_FSDP_CONFIG = "fsdp_config"
# Host RAM is in no accelerate config; GPU servers carry about this much per GPU.
HOST_GIB_PER_GPU = 128


@dataclass(frozen=True)
class Note:
    """Something the conversion could not carry over; ``line`` is 1-based (None when
    the remark is about the whole file)."""

    line: int | None
    message: str


class _NotCarried(ValueError):
    """A value with no v1 equivalent; the message says why."""


class ImportRefused(ValueError):
    """Values no accelerate config can hold (accelerate itself would fail on them): the
    import stops, and each is a note naming its key."""

    def __init__(self, notes: list[Note]):
        super().__init__("; ".join(n.message for n in notes))
        self.notes = notes


def _malformed(key: str, value: Any) -> str | None:
    """Why a value is of no shape accelerate writes for ``key`` (None when it is one)."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list) and key != "fsdp_transformer_layer_cls_to_wrap":
        return "a list"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        return "an integer out of range"
    if isinstance(value, str) and value.isdigit() and not value.isascii():
        return f"{value!r}, digits that are not ASCII"
    return None


def _boolean(value: Any) -> bool:
    # accelerate writes booleans as YAML booleans, older configs as "true"/"false".
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _NotCarried(f"{value!r} is not a boolean")


def _lookup(table: dict, value: Any, what: str) -> Any:
    # accelerate upper-cases enum names it reads; its mixed_precision words are lower case.
    for key in (value, value.upper() if isinstance(value, str) else value):
        # Only a string or an int can name an entry (a list or a dict is unhashable).
        if isinstance(key, (str, int)) and not isinstance(key, bool) and key in table:
            return table[key]
    known = ", ".join(map(str, table))
    raise _NotCarried(f"{value!r} is not a {what} fsdpspec knows ({known})")


def _strategy(value: Any) -> str:
    by_name = {name: name for name in vocab.SHARDING_STRATEGY_BY_NUMBER.values()}
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    return _lookup({**vocab.SHARDING_STRATEGY_BY_NUMBER, **by_name}, value, "sharding strategy")


def _reshard(value: Any) -> str:
    # FSDP2 says it with a boolean; accelerate 1.x also accepts a strategy here for FSDP1.
    if isinstance(value, bool) or str(value).lower() in ("true", "false"):
        return "FULL_SHARD" if _boolean(value) else "SHARD_GRAD_OP"
    return _strategy(value)


def _layer_classes(value: Any) -> list[str]:
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise _NotCarried(f"{value!r} is not a class name or a list of them")


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise _NotCarried(f"{value!r} is not a count")
    return value


def _version(value: Any) -> int:
    return _lookup({1: 1, 2: 2, "1": 1, "2": 2}, value, "FSDP version")


# accelerate key → how its value reads in v1 terms (the field comes from the vocabulary).
_CONVERT: dict[str, Callable[[Any], Any]] = {
    "fsdp_version": _version,
    "fsdp_sharding_strategy": _strategy,
    "fsdp_reshard_after_forward": _reshard,
    "fsdp_auto_wrap_policy": lambda v: _lookup(vocab.AUTO_WRAP_POLICY, v, "wrap policy"),
    "fsdp_transformer_layer_cls_to_wrap": _layer_classes,
    "fsdp_min_num_params": _count,
    "fsdp_backward_prefetch": lambda v: _lookup(vocab.BACKWARD_PREFETCH, v, "prefetch"),
    "fsdp_forward_prefetch": _boolean,
    "fsdp_offload_params": _boolean,
    "fsdp_state_dict_type": lambda v: _lookup(vocab.STATE_DICT_TYPE, v, "state dict type"),
    "fsdp_sync_module_states": _boolean,
    "fsdp_cpu_ram_efficient_loading": _boolean,
    "fsdp_use_orig_params": _boolean,
    "fsdp_activation_checkpointing": lambda v: "full" if _boolean(v) else "none",
    "mixed_precision": lambda v: _lookup(vocab.MIXED_PRECISION, v, "mixed precision"),
    "num_machines": _count,
    "num_processes": _count,
    "main_process_ip": str,
    "main_process_port": _count,
}


_KNOWN_UNMAPPED = vocab.NO_BEARING_KEYS | {"use_cpu", "distributed_type"}


def _unknown(key: str) -> str:
    guess = closest(key, [*_CONVERT, *_KNOWN_UNMAPPED])
    hint = f" (did you mean {guess}?)" if guess else ""
    return f"unknown key {key}{hint}: not imported"


@dataclass
class _Reading:
    """The accelerate values found, by key, with the line of each."""

    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    malformed: list[Note] = field(default_factory=list)


def _key_line(loaded: Loaded, pointer: str) -> int | None:
    position = loaded.source_map.keys.get(pointer)
    return position.line if position else None


def _read(loaded: Loaded) -> _Reading:
    reading = _Reading()
    top = loaded.data if isinstance(loaded.data, dict) else {}
    sections = [("", top)]
    if isinstance(top.get(_FSDP_CONFIG), dict):
        sections.append((join("", _FSDP_CONFIG), top[_FSDP_CONFIG]))
    for pointer, section in sections:
        for key, value in section.items():
            line = _key_line(loaded, join(pointer, key))
            if value is None and key in _CONVERT:
                continue  # accelerate writes null for "not set"
            problem = _malformed(key, value) if key in _CONVERT else None
            if problem:
                reading.malformed.append(Note(line, f"{key} is {problem}"))
            elif key in _CONVERT:
                try:
                    reading.values[key] = _CONVERT[key](value)
                    reading.lines[key] = line
                except _NotCarried as exc:
                    reading.notes.append(Note(line, f"{key}: {exc}; not imported"))
            elif key in vocab.SILENT_NOOP_KEYS:
                reading.notes.append(Note(line, f"{key} is a {vocab.SILENT_NOOP_KEYS[key]}"))
            elif key not in _KNOWN_UNMAPPED:
                reading.notes.append(Note(line, _unknown(key)))
    return reading


def _special_notes(loaded: Loaded) -> list[Note]:
    top = loaded.data if isinstance(loaded.data, dict) else {}
    kind = top.get("distributed_type")
    if kind is not None and kind != "FSDP":
        line = _key_line(loaded, "/distributed_type")
        return [Note(line, f"distributed_type is {kind}, not FSDP: imported as an FSDP job")]
    return []


@dataclass
class _Draft:
    """The spec being written: dotted field → (value, comment)."""

    fields: dict[str, tuple[Any, str]] = field(default_factory=dict)

    def put(self, dotted: str, value: Any, comment: str) -> None:
        self.fields[dotted] = (value, comment)


def _origin(reading: _Reading, *keys: str) -> str:
    where = ", ".join(f"{k} (line {reading.lines[k]})" for k in keys if k in reading.values)
    return f"from {where}"


def _apply_defaults(reading: _Reading, draft: _Draft) -> None:
    """accelerate's behaviour for keys it was not given, where ours would differ."""
    absent = dict(vocab.ABSENT_DEFAULTS)
    version = reading.values.get("fsdp_version", vocab.ABSENT_DEFAULTS["fsdp_version"])
    if version == 1:
        absent.update(vocab.FSDP1_ABSENT_DEFAULTS)
    for key, value in absent.items():
        if key not in reading.values:
            draft.put(vocab.KEY_TO_FIELD[key], _CONVERT[key](value),
                      f"accelerate's default: {key} not given")


def _apply_fsdp(reading: _Reading, draft: _Draft) -> None:
    for key, value in reading.values.items():
        target = vocab.KEY_TO_FIELD[key]
        if target.startswith("fsdp."):
            draft.put(target, value, _origin(reading, key))


def _apply_topology(reading: _Reading, draft: _Draft) -> list[Note]:
    values, notes = reading.values, []
    machines = values.get("num_machines", 1)
    draft.put("resources.nodes", machines, _origin(reading, "num_machines")
              if "num_machines" in values else "accelerate's default: one machine")
    if "num_processes" in values:
        total = values["num_processes"]
        if machines and total % machines == 0 and total:
            draft.put("resources.gpus_per_node", total // machines,
                      f"num_processes {total} over {machines} machine(s) "
                      f"(line {reading.lines['num_processes']})")
        else:
            notes.append(Note(reading.lines["num_processes"], f"num_processes {total} is not "
                              f"a multiple of num_machines {machines}: not imported"))
    if "main_process_ip" in values:
        port = values.get("main_process_port", DEFAULT_RDZV_PORT)
        draft.put("launch.rdzv_endpoint", f"{values['main_process_ip']}:{port}",
                  _origin(reading, "main_process_ip", "main_process_port"))
    return notes


def _spec_order(dotted: str) -> tuple[int, int]:
    """Sections, and fields in them, in the order the models declare them."""
    section, name = dotted.split(".", 1)
    sections = list(JobSpec.model_fields)
    inner = list(JobSpec.model_fields[section].annotation.model_fields)  # type: ignore[union-attr]
    return sections.index(section), inner.index(name)


def _nest(fields: dict[str, tuple[Any, str]]) -> CommentedMap:
    root = CommentedMap()
    for dotted in sorted(fields, key=_spec_order):
        value, comment = fields[dotted]
        *parents, last = dotted.split(".")
        node = root
        for name in parents:
            node = node.setdefault(name, CommentedMap())
        node[last] = value
        if comment:
            node.yaml_add_eol_comment(comment, last, column=COMMENT_COLUMN)
    return root


@dataclass
class Imported:
    """The v1 spec text written from an accelerate config, and what was left behind."""

    text: str
    notes: list[Note]


def _header(source: str, name: str) -> CommentedMap:
    document = CommentedMap(apiVersion="fsdpspec/v1", kind="TrainingJob")
    document["metadata"] = CommentedMap(name=name)
    document.yaml_set_start_comment(
        f"Imported from the accelerate config {source} by `fsdpspec import accelerate`.\n"
        "accelerate configs name neither the model nor the GPU: check model and "
        "resources.accelerator.")
    return document


def import_config(loaded: Loaded, *, name: str, model: dict[str, str],
                  accelerator: str, base_dir: Path) -> Imported:
    """A commented v1 spec equivalent to an accelerate config (already parsed with its
    positions by fsdpspec.spec.load); ``model`` and ``accelerator`` fill what accelerate
    configs do not say (an hf_config path is relative to ``base_dir``)."""
    reading = _read(loaded)
    if reading.malformed:
        raise ImportRefused(reading.malformed)
    draft = _Draft()
    notes = reading.notes + _special_notes(loaded)
    notes += _apply_topology(reading, draft)
    top = loaded.data if isinstance(loaded.data, dict) else {}
    on_cpu = str(top.get("use_cpu")).lower() == "true"
    draft.put("resources.accelerator", "cpu" if on_cpu else accelerator,
              "use_cpu: true" if on_cpu else "not in accelerate configs: the GPU you run on")
    if not on_cpu:
        per_node = draft.fields.get("resources.gpus_per_node", (1, ""))[0]
        draft.put("resources.host_memory_gib", HOST_GIB_PER_GPU * per_node,
                  f"assumed {HOST_GIB_PER_GPU} GiB per GPU: set your nodes' RAM")
    for key, value in model.items():
        draft.put(f"model.{key}", value, "not in accelerate configs: your model")
    _apply_defaults(reading, draft)
    _apply_fsdp(reading, draft)
    document = _header(loaded.file, name)
    document.update(_nest(draft.fields))
    notes += _fit_assumptions(document, draft, base_dir)
    document.update(_nest(draft.fields))
    return Imported(dump_yaml(document), sorted(notes, key=lambda n: n.line or 0))


def _fit_assumptions(document: CommentedMap, draft: _Draft, base_dir: Path) -> list[Note]:
    """Plan the imported job. The host RAM is our guess, so a guess too small for the
    job is raised to its planned peak (FS203 would otherwise blame the user's config for
    our assumption). The model is the user's choice or our placeholder: when it does not
    fit the GPUs, say so."""
    from fsdpspec.catalog.modelconfig import ModelConfigError
    from fsdpspec.job.job import resolve
    from fsdpspec.plan.memory import GIB
    from fsdpspec.plan.planner import plan_job

    try:
        job = resolve(JobSpec.model_validate(json.loads(json.dumps(document))), base_dir)
    except (ValueError, ModelConfigError):
        return []  # an invalid import is reported by `fsdpspec validate` on the result
    if job.geometry is None:
        return []
    spec, plan = job.spec, plan_job(job)
    if not plan.fits_host and spec.resources.accelerator != "cpu":
        needed = math.ceil(plan.host.peak / GIB / 64) * 64
        draft.put("resources.host_memory_gib", needed,
                  f"assumed: the planned peak ({HOST_GIB_PER_GPU} GiB per GPU is too little)"
                  ": set your nodes' RAM")
    if plan.fits_device:
        return []
    model = spec.model.preset or spec.model.hf_config
    return [Note(None, f"the model {model} does not fit {spec.world_size} × "
                 f"{plan.accelerator.name} as configured (peak {plan.device.total / GIB:.1f} "
                 f"of {plan.capacity / GIB:.1f} GiB): name your model with --preset or "
                 "--hf-config, and see `fsdpspec plan`")]


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
    }


def _fsdp2(spec: JobSpec) -> tuple[dict[str, Any], list[str]]:
    strategy = spec.fsdp.sharding_strategy
    if strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
        return {"fsdp_reshard_after_forward": strategy == "FULL_SHARD"}, []
    return {"fsdp_reshard_after_forward": True}, [
        f"fsdp.sharding_strategy {strategy} has no accelerate FSDP2 equivalent; "
        "wrote fsdp_reshard_after_forward: true"]


def _lossy_fsdp(spec: JobSpec) -> list[str]:
    notes = []
    if spec.fsdp.activation_checkpointing == "selective":
        notes.append("fsdp.activation_checkpointing selective: accelerate checkpoints "
                     "every layer; wrote true")
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
    if nodes > 1 and spec.launch.rdzv_endpoint:
        host, port = spec.launch.rdzv_endpoint.rsplit(":", 1)
        config.update(main_process_ip=host, main_process_port=int(port))
    return dict(sorted(config.items())), notes
