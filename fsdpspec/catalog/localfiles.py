"""Facts read from a spec's local input files, without torch: the tensor names and
shapes in safetensors headers, and the largest token id a tokenizer emits.

Only the few bytes that answer the question are read: a safetensors header (8-byte
little-endian length, then that much JSON), or a tokenizer's vocabulary files.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

# A header larger than this is not a header (safetensors itself refuses > 100 MB).
MAX_HEADER_BYTES = 100_000_000
MAX_TOKENIZER_BYTES = 200_000_000


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


def _header_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    try:
        with open(file, "rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise LocalFileError(f"{file} is not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise LocalFileError(f"{file} is not a safetensors file (header length "
                                     f"{length})")
            header = json.loads(fh.read(length))
    except OSError as exc:
        raise LocalFileError(f"cannot read {file}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LocalFileError(f"{file} is not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise LocalFileError(f"{file} is not a safetensors file (header is not an object)")
    return {name: _shape(file, name, entry) for name, entry in header.items()
            if name != "__metadata__"}


def _shape(file: Path, name: str, entry: object) -> tuple[int, ...]:
    shape = entry.get("shape") if isinstance(entry, dict) else None
    if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
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
    if not file.is_file():
        return None
    if file.stat().st_size > MAX_TOKENIZER_BYTES:
        raise LocalFileError(f"{file} is larger than {MAX_TOKENIZER_BYTES >> 20} MiB")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LocalFileError(f"cannot read {file}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LocalFileError(f"{file} is not valid JSON") from None


def _json_values(file: Path) -> list[int] | None:
    data = _load_json(file)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise LocalFileError(f"{file} does not hold a token → id object")
    return [v for v in data.values() if isinstance(v, int)]


def _tokenizer_json_ids(file: Path) -> list[int] | None:
    data = _load_json(file)
    if data is None:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        raise LocalFileError(f"{file} has no tokenizer model")
    vocab = model.get("vocab")
    # BPE / WordPiece / WordLevel map token → id; Unigram lists [token, score] by id.
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab or [])))
    ids += [t.get("id") for t in data.get("added_tokens") or [] if isinstance(t, dict)]
    return [i for i in ids if isinstance(i, int)]
