"""The resolved spec: the one file the engine reads, so a run is reproducible from its
directory alone. Defaults are filled in and input paths made absolute."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from fsdpspec import __version__
from fsdpspec.catalog.modelconfig import resolve_input_path
from fsdpspec.spec.v1 import JobSpec

FILENAME = "resolved-spec.json"
_INPUT_PATHS = (
    ("model", "hf_config"), ("model", "weights"), ("data", "path"), ("data", "tokenizer"),
)


def absolute_inputs(spec: JobSpec, base_dir: Path) -> JobSpec:
    """A copy of the spec whose input paths are absolute (they are relative to the spec
    file's directory when written). The fields the file left out stay unset, so
    ``as_written()`` of the copy is still what the file said."""
    data = spec.as_written()
    for section, key in _INPUT_PATHS:
        value = data.get(section, {}).get(key)
        if value is not None:
            data[section][key] = str(resolve_input_path(value, base_dir).resolve())
    return JobSpec.model_validate(data)


def content_hash(spec: JobSpec) -> str:
    canonical = json.dumps(spec.as_json_data(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def resolved_document(spec: JobSpec, run_dir: Path) -> dict[str, Any]:
    return {
        "fsdpspec_version": __version__,
        "content_hash": content_hash(spec),
        "run_dir": str(run_dir.resolve()),
        "spec": spec.as_json_data(),
    }


def write_resolved_spec(spec: JobSpec, run_dir: Path) -> Path:
    """Write run_dir/resolved-spec.json atomically (temp file, fsync, rename)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / FILENAME
    # Named for this process: nodes sharing the directory must not write one temp file.
    tmp = target.with_name(f".{FILENAME}.{socket.gethostname()}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(resolved_document(spec, run_dir), fh, indent=2)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    return target


def read_resolved_spec(path: Path) -> tuple[JobSpec, Path, dict[str, Any]]:
    """(spec, run_dir, the whole document) from a resolved-spec.json."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    return JobSpec.model_validate(document["spec"]), Path(document["run_dir"]), document
