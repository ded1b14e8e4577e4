"""What every importer builds: the values read from a source (Entry), the spec being
written (Draft), what was not carried (Note), and what stops an import (ImportRefused).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Note:
    """Something the conversion did not carry over. ``line`` is the 1-based line of the
    imported file, "other-file:line" for a file it names (a Trainer's fsdp_config), or
    None when the remark is about the whole file."""

    line: int | str | None
    message: str


def note_order(note: Note) -> tuple[int, str]:
    return (note.line, "") if isinstance(note.line, int) else (2**31, str(note.line or ""))


@dataclass(frozen=True)
class Entry:
    """One value of the source, the key as written there, and its line (in ``file``
    when that is not the imported file itself)."""

    value: Any
    line: int | None
    written: str
    file: str | None = None

    @property
    def at(self) -> int | str | None:
        return f"{self.file}:{self.line}" if self.file else self.line


def origin(*entries: Entry) -> str:
    def where(e: Entry) -> str:
        if e.file:
            return f"{e.written} ({e.file}:{e.line})"
        return f"{e.written} (line {e.line})" if e.line else e.written
    return "from " + ", ".join(where(e) for e in entries)


class ImportRefused(ValueError):
    """The source asks for what the spec cannot say (or holds values of no shape its
    tool writes): the import stops, each note naming the key or feature."""

    def __init__(self, notes: list[Note]):
        super().__init__("; ".join(n.message for n in notes))
        self.notes = notes


@dataclass
class Draft:
    """The spec being written: dotted field → (value, comment), and what was not."""

    fields: dict[str, tuple[Any, str]] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    refusals: list[Note] = field(default_factory=list)
    # field → the source value it was read or computed from (where a refusal points)
    sources: dict[str, Entry] = field(default_factory=dict)

    def put(self, dotted: str, value: Any, comment: str, source: Entry | None = None) -> None:
        self.fields[dotted] = (value, comment)
        if source is None:
            self.sources.pop(dotted, None)
        else:
            self.sources[dotted] = source

    def carry(self, dotted: str, value: Any, entry: Entry, extra: str = "") -> None:
        self.put(dotted, value, origin(entry) + extra, entry)

    def note(self, entry: Entry, message: str) -> None:
        self.notes.append(Note(entry.at, message))

    def has(self, dotted: str) -> bool:
        return dotted in self.fields

    def value(self, dotted: str, default: Any = None) -> Any:
        return self.fields.get(dotted, (default, ""))[0]

    def data_parallel_ranks(self, world: int) -> int:
        """The ranks of ``world`` that read batches of their own, under the tensor- and
        context-parallel degrees written so far (ParallelDims counts them)."""
        from fsdpspec.job.parallel import parallel_dims

        if world < 1:
            return world  # no ranks: validating the draft says so (FS054)
        return parallel_dims(world_size=world, strategy="FULL_SHARD", shard_group_size=None,
                             gpus_per_node=world, fsdp_version=2,
                             tp=self.value("parallelism.tensor_parallel", 1),
                             cp=self.value("parallelism.context_parallel", 1)).dp_size

    def refuse(self, line: int | str | None, feature: str, code: str = "FS050") -> None:
        """Stop the import: the source asks for ``feature``, which the spec lacks."""
        self.refusals.append(Note(line, f"{code} {feature}: the spec cannot say this yet"))


@dataclass(frozen=True)
class Assumptions:
    """What the command line fills in where a source is silent."""

    accelerator: str = "H100-80GB"
    gpus_per_node: int = 8
    preset: str | None = None
    hf_config: str | None = None
