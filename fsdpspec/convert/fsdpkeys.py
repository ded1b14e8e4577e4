"""accelerate's FSDP keys read as v1 fields, as accelerate itself reads them.

accelerate configs hold these keys; HF Trainer hands its `fsdp` option and `fsdp_config`
to accelerate as the same keys, and axolotl writes them (with or without the `fsdp_`
prefix). So one reader serves the three importers: the values, accelerate's defaults for
keys left out, which of two keys that say the same thing accelerate obeys, and the
settings accelerate runs that fsdpspec must write differently (FS903).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fsdpspec.convert import accelerate_vocab as vocab
from fsdpspec.convert.draft import Draft, Entry, Note
from fsdpspec.spec.did_you_mean import closest


class NotCarried(ValueError):
    """A value with no v1 equivalent; the message says why."""


def malformed(key: str, value: Any) -> str | None:
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


# The digits of a whole number an import reads: ASCII only (str.isdigit also takes '²'
# and '٣', which int() refuses), at most 19 (2**63 has 19; int() refuses past 4300).
_WHOLE = re.compile(r"[+-]?[0-9]{1,19}")


def whole(text: str) -> int | None:
    """The integer ``text`` spells in ASCII decimal digits, None for anything else."""
    text = text.strip()
    return int(text) if _WHOLE.fullmatch(text) else None


def boolean(value: Any) -> bool:
    # accelerate writes booleans as YAML booleans, older configs (and shells) as strings.
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise NotCarried(f"{value!r} is not a boolean")


def lookup(table: dict, value: Any, what: str) -> Any:
    # accelerate upper-cases enum names it reads; its mixed_precision words are lower case.
    for key in (value, value.upper() if isinstance(value, str) else value):
        # Only a string or an int can name an entry (a list or a dict is unhashable).
        if isinstance(key, (str, int)) and not isinstance(key, bool) and key in table:
            return table[key]
    known = ", ".join(map(str, table))
    raise NotCarried(f"{value!r} is not a {what} fsdpspec knows ({known})")


def strategy(value: Any) -> str:
    by_name = {name: name for name in vocab.SHARDING_STRATEGY_BY_NUMBER.values()}
    if isinstance(value, str) and whole(value) is not None:
        value = whole(value)
    return lookup({**vocab.SHARDING_STRATEGY_BY_NUMBER, **by_name}, value, "sharding strategy")


def reshard(value: Any) -> str:
    # FSDP2 says it with a boolean; accelerate 1.x also accepts a strategy here for FSDP1.
    if isinstance(value, bool) or str(value).lower() in ("true", "false"):
        return "FULL_SHARD" if boolean(value) else "SHARD_GRAD_OP"
    return strategy(value)


def layer_classes(value: Any) -> list[str]:
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise NotCarried(f"{value!r} is not a class name or a list of them")


def count(value: Any) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        if whole(value) is None:
            raise NotCarried(f"a number of {len(value)} digits is not a count")
        value = whole(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise NotCarried(f"{value!r} is not a count")
    return value


def version(value: Any) -> int:
    return lookup({1: 1, 2: 2, "1": 1, "2": 2}, value, "FSDP version")


# accelerate key → how its value reads in v1 terms (the field comes from the vocabulary).
CONVERT: dict[str, Callable[[Any], Any]] = {
    "fsdp_version": version,
    "fsdp_sharding_strategy": strategy,
    "fsdp_reshard_after_forward": reshard,
    "fsdp_auto_wrap_policy": lambda v: lookup(vocab.AUTO_WRAP_POLICY, v, "wrap policy"),
    "fsdp_transformer_layer_cls_to_wrap": layer_classes,
    "fsdp_min_num_params": count,
    "fsdp_backward_prefetch": lambda v: lookup(vocab.BACKWARD_PREFETCH, v, "prefetch"),
    "fsdp_forward_prefetch": boolean,
    "fsdp_offload_params": boolean,
    "fsdp_state_dict_type": lambda v: lookup(vocab.STATE_DICT_TYPE, v, "state dict type"),
    "fsdp_sync_module_states": boolean,
    "fsdp_cpu_ram_efficient_loading": boolean,
    "fsdp_use_orig_params": boolean,
    "fsdp_limit_all_gathers": boolean,
    "fsdp_activation_checkpointing": lambda v: "full" if boolean(v) else "none",
    "mixed_precision": lambda v: lookup(vocab.MIXED_PRECISION, v, "mixed precision"),
    "num_machines": count,
    "num_processes": count,
    "main_process_ip": str,
    "main_process_port": count,
}

_STRATEGY_KEYS = ("fsdp_sharding_strategy", "fsdp_reshard_after_forward")


def _unknown(key: str) -> str:
    # Real keys are never guessed at: only a key accelerate does not have gets a hint.
    guess = closest(key, [*CONVERT, *vocab.NOT_CARRIED, *vocab.NO_BEARING_KEYS])
    hint = f" (did you mean {guess}?)" if guess else ""
    return f"unknown key {key}{hint}: not imported"


@dataclass
class FsdpReading:
    """The accelerate values found, by key, with where each was written."""

    values: dict[str, Any] = field(default_factory=dict)
    entries: dict[str, Entry] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    malformed: list[Note] = field(default_factory=list)

    def version(self) -> int:
        return self.values.get("fsdp_version", vocab.ABSENT_DEFAULTS["fsdp_version"])


def read_keys(entries: dict[str, Entry], *, ignore: frozenset[str] = frozenset()) -> FsdpReading:
    """Each accelerate key's value in v1 terms; a key that is not read is a note with its
    line, a value of no shape accelerate writes is ``malformed`` (the import stops)."""
    reading = FsdpReading()
    for key, entry in entries.items():
        value, line = entry.value, entry.at
        if value is None and (key in CONVERT or key in vocab.NOT_CARRIED):
            continue  # accelerate writes null for "not set"
        problem = malformed(key, value) if key in CONVERT else None
        if problem:
            reading.malformed.append(Note(line, f"FS052 {entry.written} is {problem}"))
        elif key in CONVERT:
            try:
                reading.values[key] = CONVERT[key](value)
                reading.entries[key] = entry
            except NotCarried as exc:
                reading.notes.append(Note(line, f"{entry.written}: {exc}; not imported"))
        elif key in vocab.SILENT_NOOP_KEYS:
            reading.notes.append(Note(line, f"{entry.written} is a "
                                      f"{vocab.SILENT_NOOP_KEYS[key]}"))
        elif key in vocab.NOT_CARRIED:
            reading.notes.append(Note(line, f"{entry.written}: {vocab.NOT_CARRIED[key]}; "
                                      "not imported"))
        elif key not in vocab.NO_BEARING_KEYS and key not in ignore:
            reading.notes.append(Note(line, _unknown(entry.written)))
    _settle_strategy(reading)
    return reading


def _settle_strategy(reading: FsdpReading) -> None:
    """accelerate obeys one of the two strategy keys: under FSDP1 fsdp_sharding_strategy
    (fsdp_reshard_after_forward only when it is absent); under FSDP2 only
    fsdp_reshard_after_forward, over all processes (hybrid sharding is parallelism_config)."""
    values, entries = reading.values, reading.entries
    if not all(key in values for key in _STRATEGY_KEYS) and reading.version() == 1:
        return
    named, resharded = (values.get(k) for k in _STRATEGY_KEYS)
    if reading.version() == 1:
        ignored, obeyed = "fsdp_reshard_after_forward", "fsdp_sharding_strategy"
    elif named is None or named in ("FULL_SHARD", "SHARD_GRAD_OP") and resharded in (
            None, named):
        if named is not None and resharded is None:
            values["fsdp_reshard_after_forward"] = named
            entries["fsdp_reshard_after_forward"] = entries["fsdp_sharding_strategy"]
        values.pop("fsdp_sharding_strategy", None)
        return
    else:
        ignored, obeyed = "fsdp_sharding_strategy", "fsdp_reshard_after_forward"
    if obeyed not in values:  # FSDP2 with a hybrid strategy and no reshard key
        values[obeyed] = "FULL_SHARD"
        entries[obeyed] = Entry(True, None, "accelerate's FSDP2 default "
                                "fsdp_reshard_after_forward: true")
    entry = entries[ignored]
    reading.notes.append(Note(entry.at, (
        f"{entry.written} {values[ignored]} is not read by accelerate with fsdp_version "
        f"{reading.version()}, which shards as {values[obeyed]}"
        + (" over all processes (hybrid sharding is parallelism_config's "
           "dp_replicate_size × dp_shard_size)" if reading.version() == 2 else
           f" from {entries[obeyed].written}") + ": not imported")))
    values.pop(ignored)
    entries.pop(ignored)


def apply_fsdp(reading: FsdpReading, draft: Draft) -> None:
    """The FSDP fields of the draft: accelerate's defaults for keys not given, then the
    values given."""
    absent = dict(vocab.ABSENT_DEFAULTS)
    if reading.version() == 1:
        absent.update(vocab.FSDP1_ABSENT_DEFAULTS)
    for key, value in absent.items():
        if key not in reading.values:
            draft.put(vocab.KEY_TO_FIELD[key], CONVERT[key](value),
                      f"accelerate's default: {key} not given")
    for key, value in reading.values.items():
        target = vocab.KEY_TO_FIELD[key]
        if target.startswith("fsdp."):
            draft.carry(target, value, reading.entries[key])


def take_layers(reading: FsdpReading, draft: Draft) -> Entry | None:
    """The wrapping classes the source names (as a list), taken out of the draft: the
    core checks them against the model before any is written."""
    draft.fields.pop("fsdp.transformer_layer_cls", None)
    entry = reading.entries.get("fsdp_transformer_layer_cls_to_wrap")
    if entry is None:
        return None
    return Entry(reading.values["fsdp_transformer_layer_cls_to_wrap"], entry.line,
                 entry.written, entry.file)
