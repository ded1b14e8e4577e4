"""The one reader of the JSON and JSONL files fsdpspec reads: model configs, tokenizer
files, safetensors headers, the Hugging Face cache's refs, and a run directory's
resolved-spec.json, manifests, metrics.jsonl and events.jsonl.

Total by construction: only a regular file is read (opened non-blocking and checked
with fstat, so a FIFO or a device never blocks; a read that a stale network mount
never answers is given up after READ_TIMEOUT_S), never more than its size limit, and
the JSON is bounded in depth, integer digits and string length, with no NaN or
Infinity and no float that overflows. Every failure is a JsonFileError whose message is
one line naming the file (and the line of a JSONL record). Torch-free.
"""

from __future__ import annotations

import functools
import json
import math
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

READ_TIMEOUT_S = 10.0


class JsonFileError(ValueError):
    """A file that cannot be read as the bounded JSON it should be; one line. ``code``
    is the FS0xx code a command shows with it (see fsdpspec/spec/codes.py)."""

    code = "FS040"

    def coded(self) -> str:
        return f"{self.code} {self}"


class RecordError(JsonFileError):
    """Valid JSON, but a record of the wrong shape for its kind (a metrics record whose
    step is a string, an event without its name …); one line naming file and line."""

    code = "FS041"


@dataclass(frozen=True)
class Limits:
    """The bounds a JSON file is read within (size, depth, digits, string length)."""

    max_bytes: int = 1 << 20
    max_depth: int = 32
    max_int_digits: int = 100  # no count, size or id needs more
    max_string: int = 1 << 20
    nonfinite: bool = False  # NaN / Infinity, as json.dumps writes a non-finite loss


def _strerror(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_within(fd: int, limit: int, path: Path) -> bytes:
    """Read up to ``limit`` bytes, giving up after READ_TIMEOUT_S (the thread of a read
    that never returns is left behind: nothing can interrupt it)."""
    outcome: list[Any] = []

    def read() -> None:
        try:
            outcome.append(_read_fd(fd, limit))
        except OSError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(READ_TIMEOUT_S)
    if not outcome:
        raise JsonFileError(f"{path}: no answer after {READ_TIMEOUT_S:g} s (a stale network "
                            "mount?)")
    if isinstance(outcome[0], OSError):
        raise JsonFileError(f"cannot read {path}: {_strerror(outcome[0])}")
    return outcome[0]


def _open_regular(path: Path) -> int:
    """A read-only descriptor of the regular file ``path`` (opened non-blocking, so a
    FIFO is seen for what it is rather than waited on); JsonFileError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise JsonFileError(f"cannot read {path}: {_strerror(exc)}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
        raise JsonFileError(f"{path} is {kind}, not a regular file")
    return fd


def read_regular(path: Path, max_bytes: int, *, offset: int = 0, whole: bool = True) -> bytes:
    """Up to ``max_bytes`` bytes of the regular file ``path`` from ``offset``; a
    JsonFileError for a missing file, a FIFO, a device, a directory, and (``whole``) a
    file with more than ``max_bytes`` from there."""
    fd = _open_regular(path)
    try:
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        raw = _read_within(fd, max_bytes + 1 if whole else max_bytes, path)
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise JsonFileError(f"{path} is larger than {_size(max_bytes)}")
    return raw


def _size(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 else f"{count} bytes"


class _Refused(ValueError):
    pass


def _parse_int(limit: int):
    def parse(text: str) -> int:
        if len(text.lstrip("-")) > limit:
            raise _Refused(f"an integer of {len(text)} digits is out of range")
        return int(text)
    return parse


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused(f"{text[:40]} overflows a float")
    return value


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a number JSON allows")


def _check_shape(value: Any, limits: Limits) -> None:
    """Depth, string lengths and integer digits (TOML writes 0x… integers that no
    digit limit of int() bounds), without recursion."""
    max_bits = math.ceil(limits.max_int_digits * math.log2(10))
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if level > limits.max_depth:
            raise _Refused(f"nested deeper than {limits.max_depth} levels")
        if isinstance(node, str) and len(node) > limits.max_string:
            raise _Refused(f"a string of {len(node)} characters is longer than allowed")
        if isinstance(node, int) and abs(node).bit_length() > max_bits:
            raise _Refused(f"an integer of more than {limits.max_int_digits} digits is out "
                           "of range")
        if isinstance(node, dict):
            stack.extend((key, level) for key in node)
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, level + 1) for child in node)


@functools.lru_cache(maxsize=16)
def _decoder(limits: Limits, short: bool) -> json.JSONDecoder:
    """The decoder of ``limits``; ``short`` for a text no longer than max_int_digits,
    whose integers cannot be too long (json's own parser then reads them, in C)."""
    return json.JSONDecoder(parse_constant=float if limits.nonfinite else _no_constant,
                            parse_int=None if short else _parse_int(limits.max_int_digits),
                            parse_float=_parse_float)


def _may_break_shape(text: str, limits: Limits) -> bool:
    """Whether the value of ``text`` could be too deep or hold too long a string: a
    value is nested no deeper than the brackets its text opens, plus one, and no string
    is longer than its text. (Most records are neither: a metrics line is read at a
    third of the cost.)"""
    return (len(text) > limits.max_string
            or text.count("[") + text.count("{") >= limits.max_depth)


def check_shape(value: Any, where: str, limits: Limits = Limits()) -> None:
    """JsonFileError naming ``where`` when plain data another parser built (TOML) is
    nested deeper, or holds longer strings, than ``limits`` allow."""
    try:
        _check_shape(value, limits)
    except _Refused as exc:
        raise JsonFileError(f"{where}: {exc}") from None


def parse(text: str | bytes, where: str, limits: Limits = Limits()) -> Any:
    """The JSON value of ``text``; JsonFileError naming ``where`` (file, or file:line)."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if text.startswith("\ufeff"):
            raise _Refused("not valid JSON (a UTF-8 byte order mark)")
        value = _decoder(limits, len(text) <= limits.max_int_digits).decode(text)
        if _may_break_shape(text, limits):
            _check_shape(value, limits)
    except _Refused as exc:
        raise JsonFileError(f"{where}: {exc}") from None
    except RecursionError:
        raise JsonFileError(f"{where}: nested deeper than {limits.max_depth} levels") from None
    except UnicodeDecodeError:
        raise JsonFileError(f"{where}: not valid JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise JsonFileError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") \
            from None
    return value


def load(path: Path, limits: Limits = Limits()) -> Any:
    """The JSON value in the regular file ``path``."""
    return parse(read_regular(path, limits.max_bytes), str(path), limits)


def load_object(path: Path, limits: Limits = Limits()) -> dict[str, Any]:
    """The JSON object in the regular file ``path``."""
    value = load(path, limits)
    if not isinstance(value, dict):
        raise JsonFileError(f"{path}: does not hold a JSON object")
    return value


JSONL_CHUNK = 1 << 20


def _jsonl_lines(path: Path, max_bytes: int) -> Iterator[bytes]:
    """The complete lines of ``path``, read a chunk at a time (memory bounded by the
    chunk and the longest line, not the file); a torn last line (a writer killed
    mid-line, or still writing) is not one. JsonFileError past ``max_bytes``."""
    fd = _open_regular(path)
    try:
        if os.fstat(fd).st_size > max_bytes:
            raise JsonFileError(f"{path} is larger than {_size(max_bytes)}")
        pending, total = b"", 0
        while chunk := _read_within(fd, JSONL_CHUNK, path):
            total += len(chunk)
            if total > max_bytes:  # it grew while being read
                raise JsonFileError(f"{path} is larger than {_size(max_bytes)}")
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            yield from lines
    finally:
        os.close(fd)


def load_jsonl(path: Path, limits: Limits = Limits()) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each non-blank line of the JSONL file ``path``, read
    as a stream; every record an object. A torn last line is skipped."""
    for number, raw in enumerate(_jsonl_lines(path, limits.max_bytes), start=1):
        if not raw.strip():
            continue
        record = parse(raw.decode("utf-8", errors="replace"), f"{path}:{number}", limits)
        if not isinstance(record, dict):
            raise JsonFileError(f"{path}:{number}: not a JSON object")
        yield number, record


def read_text(path: Path, max_bytes: int) -> str:
    """A small text file (a cache ref, a `latest` pointer), stripped."""
    raw = read_regular(path, max_bytes)
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise JsonFileError(f"{path}: not UTF-8 text") from None
