"""``data.source: dataset``: records → examples → packed sequences, tokenized once.

The first process of each node loads the records, tokenizes and packs them, and writes
the result to ``run_dir/data-cache/<key>.pt``; the key hashes the datasets' fingerprints,
the tokenizer's files, and every data option that changes the tokens. The other processes
wait at a barrier and read that file, and a resumed run reads it again without
tokenizing. A streamed dataset (``data.streaming``) is not cached: every process reads the
stream in order and keeps the sequences it trains on.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from fsdpspec.spec.v1 import Data
from fsdpspec_runners.engine.data import SequenceSource, Tokenizer, model_tokenizer
from fsdpspec_runners.engine.dist import Runtime, console
from fsdpspec_runners.engine.errors import EngineError, first_line
from fsdpspec_runners.engine.examples import example_builder
from fsdpspec_runners.engine.packing import (
    Fitting,
    Row,
    Sequences,
    example_rows,
    text_rows,
    to_tensors,
)
from fsdpspec_runners.engine.preference_data import PairFitting, preference_rows
from fsdpspec_runners.engine.records import RecordSets, fingerprint, load_record_sets

CACHE_DIR = "data-cache"


def dataset_sources(
    data: Data, vocab_size: int | None, seed: int, run_dir: Path, runtime: Runtime
) -> tuple[Any, Sequences | None]:
    """The training source and the evaluation sequences (None without ``data.eval``)."""
    tokenizer = model_tokenizer(data, vocab_size)
    if data.streaming:
        records = load_record_sets(data, seed)
        evaluation = None
        if records.eval is not None:
            evaluation, note = _pack(records.eval, data, tokenizer, "data.eval")
            if note:
                console(runtime, note)
        return StreamSource(records.train, data, tokenizer, runtime), evaluation
    outcome: list[Any] = [None]  # the cache key, or rank 0's error for every rank
    if runtime.local_rank == 0:
        try:
            outcome = [_build_cache(data, tokenizer, seed, run_dir)]
        except Exception as exc:  # every rank must hear of it, or they wait forever
            outcome = [as_data_error(exc)]
    dist.broadcast_object_list(outcome, src=0)  # also the barrier: the file is written
    if isinstance(outcome[0], EngineError):
        raise outcome[0]
    path = run_dir / CACHE_DIR / f"{outcome[0]}.pt"
    if not path.is_file():
        raise EngineError(f"{path} is missing on this node: the data differs between nodes")
    cached = torch.load(path, weights_only=True)
    for note in cached.get("notes", []):  # read back, so a resumed run says it again
        console(runtime, note)
    source = SequenceSource(data, vocab_size, seed, packed=cached["train"])
    return source, cached.get("eval")


def _build_cache(data: Data, tokenizer: Tokenizer, seed: int, run_dir: Path) -> str:
    """Tokenize and pack into the cache unless it is there; returns the cache key."""
    records = load_record_sets(data, seed)
    key = _cache_key(data, tokenizer, records, seed)
    path = run_dir / CACHE_DIR / f"{key}.pt"
    if path.is_file():
        return key
    parts = {"train": (records.train, "data.path"), "eval": (records.eval, "data.eval")}
    packed: dict[str, Any] = {"notes": []}
    for name, (part, field) in parts.items():
        if part is not None:
            packed[name], note = _pack(part, data, tokenizer, field)
            packed["notes"] += [note] if note else []
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(packed, tmp)
    os.replace(tmp, path)
    return key


def _cache_key(data: Data, tokenizer: Tokenizer, records: RecordSets, seed: int) -> str:
    options = data.model_dump(
        mode="json", exclude={"micro_batch_size", "global_batch_size", "streaming", "tokenizer"}
    )
    identity = {
        "train": fingerprint(records.train),
        "eval": fingerprint(records.eval) if records.eval is not None else None,
        "tokenizer": _tokenizer_hash(tokenizer.directory),
        "options": options,
        "seed": seed if data.eval.fraction else None,  # the held-out records depend on it
        # How examples are fitted to seq_len (2: a prompt too long is cut from its start):
        # a cache packed the older way must not be read as this one.
        "packing": 2,
    }
    canonical = json.dumps(identity, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _tokenizer_hash(directory: str | None) -> str:
    if directory is None:
        return "bytes"
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _fitting(data: Data) -> Fitting:
    return PairFitting() if data.format == "preference" else Fitting()


def _rows(records: Any, data: Data, tokenizer: Tokenizer, fitting: Fitting,
          part: str) -> Iterator[Row]:
    if data.format == "preference":
        assert isinstance(fitting, PairFitting)
        return preference_rows(records, data, tokenizer, fitting, _where(data, part))
    build = example_builder(data, tokenizer)
    examples = (build(record) for record in records)
    if data.format == "text":
        return text_rows(examples, data.seq_len, tokenizer.pad_id)
    return example_rows(examples, data.seq_len, tokenizer.pad_id, several=data.packing,
                        fitting=fitting)


def _pack(records: Any, data: Data, tokenizer: Tokenizer,
          part: str) -> tuple[Sequences, str | None]:
    """``part`` (data.path or data.eval) packed into sequences, and the line that says
    how its examples were fitted to seq_len (None when all fitted); an error names it."""
    fitting = _fitting(data)
    try:
        return (to_tensors(_rows(records, data, tokenizer, fitting, part), data.seq_len),
                fitting.note(part, data.seq_len))
    except EngineError as exc:
        raise EngineError(f"{part}: {exc}") from None


def _where(data: Data, part: str) -> str:
    """The file or directory (and split) a part of the data is read from."""
    if part == "data.eval" and not data.eval.fraction:
        return f"{data.eval.path or data.path} (split {data.eval.split or data.split})"
    return f"{data.path} (split {data.split})"


def as_data_error(exc: Exception) -> EngineError:
    """A failure while reading, tokenizing or packing the data, as one line: the
    libraries underneath (datasets, pyarrow, tokenizers, jinja) raise their own kinds,
    and a record or file the user supplied is the cause either way."""
    if isinstance(exc, EngineError):
        return exc
    return EngineError(f"data: {type(exc).__name__}: {first_line(exc)}")


class StreamSource:
    """Sequences of a streamed dataset in stream order, read forward only; each epoch
    reads the stream again from the start. Resuming reads (and tokenizes) the stream up
    to the next unseen sequence."""

    def __init__(self, records: Any, data: Data, tokenizer: Tokenizer,
                 runtime: Runtime | None = None) -> None:
        self._records, self._data, self._tokenizer = records, data, tokenizer
        self._runtime = runtime
        self._fitting = _fitting(data)
        self._rows: Iterator[Row] = iter(())
        self._next = 0  # index of the sequence self._rows yields next
        self._restart()

    def _restart(self) -> None:
        self._rows = _rows(self._records, self._data, self._tokenizer, self._fitting,
                           "data.path")
        self._read_this_epoch = 0

    def _tell_fitting(self) -> None:
        """Say once, at the first example that did not fit as written, what was done."""
        if self._runtime is None:
            return
        note = self._fitting.note("data.path (so far in the stream)", self._data.seq_len)
        if note:
            console(self._runtime, note)
            self._runtime = None

    def sequence(self, index: int) -> dict[str, torch.Tensor]:
        """The ``index``-th sequence; indices must not go backwards."""
        assert index >= self._next, "a stream is read forward only"
        while True:
            try:
                row = next(self._rows, None)
            except Exception as exc:  # a record the stream could not read or tokenize
                raise as_data_error(exc) from None
            if row is None:
                if self._read_this_epoch == 0:
                    raise EngineError("data.path: the data stream holds no sequence that "
                                      "carries loss")
                self._restart()
                continue
            self._tell_fitting()
            self._read_this_epoch += 1
            self._next += 1
            if self._next - 1 == index:
                return {name: torch.tensor(values) for name, values in row.items()}
