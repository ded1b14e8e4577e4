"""Facts read from a spec's local input files, without torch: the tensor names and
shapes in safetensors headers, and the largest token id a tokenizer emits.

Only the few bytes that answer the question are read: a safetensors header (8-byte
little-endian length, then that much JSON), or a tokenizer's vocabulary files.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fsdpspec.jsonfile import JsonFileError, Limits, load, parse, read_regular

# A header larger than this is not a header (safetensors itself refuses > 100 MB).
MAX_HEADER_BYTES = 100_000_000
MAX_TOKENIZER_BYTES = 200_000_000
HEADER_LIMITS = Limits(max_bytes=MAX_HEADER_BYTES, max_depth=8, max_string=1 << 16)
# A tokenizer.json nests its normalizers and pre-tokenizers a few levels; merges and
# vocabularies are long but flat.
TOKENIZER_LIMITS = Limits(max_bytes=MAX_TOKENIZER_BYTES, max_depth=32, max_string=1 << 20)


class LocalFileError(ValueError):
    """A local input file that cannot be read as what it should be (one line)."""


def safetensors_shapes(directory: Path) -> dict[str, tuple[int, ...]] | None:
    """Tensor name → shape over every ``*.safetensors`` file of ``directory`` (None when
    it holds none, e.g. only ``.bin`` files, which cannot be read without torch)."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        shapes.update(_header_shapes(file))
    return shapes


def safetensors_header(file: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (its 8-byte little-endian length, then that
    much JSON), read through the bounded reader."""
    try:
        prefix = read_regular(file, 8, whole=False)
    except JsonFileError as exc:
        raise LocalFileError(str(exc)) from None
    if len(prefix) < 8:
        raise LocalFileError(f"{file} is not a safetensors file (too short)")
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES:
        raise LocalFileError(f"{file} is not a safetensors file (header length {length})")
    try:
        raw = read_regular(file, length, offset=8, whole=False)
    except JsonFileError as exc:
        raise LocalFileError(str(exc)) from None
    if len(raw) < length:
        raise LocalFileError(f"{file} is not a safetensors file (truncated header)")
    try:
        header = parse(raw, str(file), HEADER_LIMITS)
    except JsonFileError as exc:
        reason = str(exc).removeprefix(f"{file}: ")
        raise LocalFileError(f"{file} is not a safetensors file (header is not JSON: "
                             f"{reason})") from None
    if not isinstance(header, dict):
        raise LocalFileError(f"{file} is not a safetensors file (header is not an object)")
    return header


def _header_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    header = safetensors_header(file)
    return {name: _shape(file, name, entry) for name, entry in header.items()
            if name != "__metadata__"}


def _shape(file: Path, name: str, entry: object) -> tuple[int, ...]:
    shape = entry.get("shape") if isinstance(entry, dict) else None
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise LocalFileError(f"{file}: tensor {name!r} has no shape in the header")
    return tuple(shape)


def tokenizer_vocab_size(directory: Path) -> int | None:
    """One more than the largest token id the tokenizer in ``directory`` can emit (what
    the model's embedding must hold), from tokenizer.json or vocab.json plus
    added_tokens.json; None when neither is there (e.g. a sentencepiece model only)."""
    ids = _tokenizer_json_ids(directory / "tokenizer.json")
    if ids is None:
        ids = _json_values(directory / "vocab.json")
    if ids is None:
        return None
    added = _json_values(directory / "added_tokens.json") or []
    return max([*ids, *added], default=-1) + 1


def _load_json(file: Path) -> object | None:
    if not os.path.lexists(file):
        return None
    try:
        return load(file, TOKENIZER_LIMITS)
    except JsonFileError as exc:
        raise LocalFileError(str(exc)) from None


def _ids(values: Iterable[object]) -> list[int]:
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _json_values(file: Path) -> list[int] | None:
    data = _load_json(file)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise LocalFileError(f"{file} does not hold a token → id object")
    return _ids(data.values())


def _tokenizer_json_ids(file: Path) -> list[int] | None:
    data = _load_json(file)
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise LocalFileError(f"{file} has no tokenizer model")
    model = data["model"]
    vocab, added = model.get("vocab"), data.get("added_tokens")
    if not isinstance(vocab, (dict, list, type(None))):
        raise LocalFileError(f"{file}: model.vocab is neither a token → id object nor a list")
    if not isinstance(added, (list, type(None))):
        raise LocalFileError(f"{file}: added_tokens is not a list")
    # BPE / WordPiece / WordLevel map token → id; Unigram lists [token, score] by id.
    ids = _ids(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab or [])))
    return ids + _ids(t.get("id") for t in added or [] if isinstance(t, dict))
