"""A checkpoint's manifest: every file with its size and sha256, written last (after
every rank's shards and DCP's ``.metadata``), and verified before a resume, so that a
truncated, flipped or missing file is never loaded; and what the checkpoint holds of the
model (``holds``: every weight, or a LoRA's adapters with their rank and targets), which
`export hf` follows over an edited resolved-spec.json. Generic over the layout: it lists
whatever the save wrote. Torch-free."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from fsdpspec.atomicio import write_text
from fsdpspec.jsonfile import JsonFileError, Limits, load_object

MANIFEST = "manifest.json"
MANIFEST_LIMITS = Limits(max_bytes=64 << 20, max_depth=4, max_string=4096)


def _well_formed(name: str, entry: object) -> bool:
    """A relative path inside the checkpoint, with an integer size and a hex digest."""
    parts = Path(name).parts
    return (isinstance(entry, dict) and not Path(name).is_absolute() and ".." not in parts
            and isinstance(entry.get("bytes"), int) and not isinstance(entry["bytes"], bool)
            and isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(directory: Path, holds: dict[str, Any]) -> None:
    """Record every file under ``directory`` and what it ``holds`` of the model; the
    manifest is the checkpoint's last file."""
    files = {str(p.relative_to(directory)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in _files(directory)}
    write_text(directory / MANIFEST, json.dumps({"holds": holds, "files": files}, indent=1)
               + "\n")


def recorded_holds(directory: Path) -> Any:
    """What the (verified) manifest of ``directory`` says the checkpoint holds; None for
    a manifest written before it said."""
    return load_object(directory / MANIFEST, MANIFEST_LIMITS).get("holds")


def _recorded(directory: Path, entry_files: tuple[str, ...]) -> dict[str, dict]:
    path = directory / MANIFEST
    if not os.path.lexists(path):
        raise ValueError("it has no manifest")
    try:
        files = load_object(path, MANIFEST_LIMITS).get("files")
    except JsonFileError as exc:
        raise ValueError(f"its {MANIFEST} is unreadable ({exc.coded()})") from None
    if not isinstance(files, dict) or not any(name in files for name in entry_files):
        raise ValueError(f"its {MANIFEST} lists none of {', '.join(entry_files)}")
    return files


def verification_problem(directory: Path, entry_files: tuple[str, ...]) -> str | None:
    """Why the checkpoint in ``directory`` does not verify (None when every recorded
    file is there with its size and checksum, and one of ``entry_files``, the files that
    make a checkpoint complete, is among them)."""
    try:
        recorded = _recorded(directory, entry_files)
    except ValueError as exc:
        return str(exc)
    for name, entry in recorded.items():
        if not _well_formed(name, entry):
            return f"its {MANIFEST} entry for {name} is malformed"
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != entry["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, not {entry['bytes']}"
        if _sha256(path) != entry["sha256"]:
            return f"{name} does not match its checksum"
    return None
