"""The resolved spec: the one file the engine reads, so a run is reproducible from its
directory alone. Defaults are filled in and input paths made absolute."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic_core import ValidationError

from fsdpspec import __version__
from fsdpspec.atomicio import write_text
from fsdpspec.catalog.config_source import (
    ModelConfigError,
    resolve_input_path,
    resolve_model_input,
)
from fsdpspec.catalog.configjson import ConfigJsonError, read_bytes
from fsdpspec.catalog.hub import parse_hub_id
from fsdpspec.job.job import Job, resolve
from fsdpspec.job.record import job_from_record, job_record
from fsdpspec.job.rundir import RESOLVED_SPEC
from fsdpspec.jsonfile import JsonFileError, Limits, RecordError, load_object
from fsdpspec.spec.v1 import MODEL_HUB_INPUTS, JobSpec

FILENAME = RESOLVED_SPEC
_ROOT = Path("/")  # input paths of the spec written here are already absolute
MODEL_CONFIG_DIGEST = "model_config_sha256"


def absolute_inputs(spec: JobSpec, base_dir: Path) -> JobSpec:
    """A copy of the spec whose input paths are absolute (they are relative to the spec
    file's directory when written) and whose Hub ids are their cached snapshots. The
    fields the file left out stay unset, so ``as_written()`` of the copy is still what
    the file said."""
    data = spec.as_written()
    for field in MODEL_HUB_INPUTS:  # the inputs a Hub model id may name (data: below)
        section, key = field.path
        value = data.get(section, {}).get(key)
        if value is not None:
            # realpath, unlike Path.resolve, never raises: a symlink loop is left for
            # the pre-flight check to report with the field's position.
            data[section][key] = os.path.realpath(resolve_model_input(value, base_dir))
    hub = spec.data.source == "dataset"
    written = data.get("data", {})
    for holder in (written, written.get("eval", {})):
        if holder.get("path") is not None:
            holder["path"] = _data_location(holder["path"], base_dir, hub=hub)
    return JobSpec.model_validate(data)


def _data_location(value: str | None, base_dir: Path, *, hub: bool) -> str | None:
    """An absolute local path, or (dataset source) a Hub dataset id kept as written
    (`org/name` with no such local path): the engine tells them apart by whether the
    path is absolute."""
    if value is None:
        return None
    local = resolve_input_path(value, base_dir)
    if hub and not local.exists() and parse_hub_id(value, "dataset"):
        return value
    return str(local.resolve())


def content_hash(spec: JobSpec) -> str:
    canonical = json.dumps(spec.as_json_data(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def model_config_digest(spec: JobSpec) -> str | None:
    """sha256 of the model's config.json (None without one, or where it cannot be read,
    as on the machine that exports a Slurm job): the same path with another content,
    say another rope_theta, is another model."""
    if spec.model.hf_config is None:
        return None
    path = Path(spec.model.hf_config)
    try:
        raw = read_bytes(path / "config.json" if path.is_dir() else path)
    except ConfigJsonError:
        return None
    return hashlib.sha256(raw).hexdigest()


def resolved_job(spec: JobSpec) -> Job | None:
    """The resolved job (None where the model config cannot be read here)."""
    try:
        return resolve(spec, _ROOT)
    except ModelConfigError:
        return None


def resolved_document(spec: JobSpec, run_dir: Path) -> dict[str, Any]:
    """What resolved-spec.json holds: the spec with absolute inputs, its identity, and
    the job resolved once (`fsdpspec.job.record`: the layout and the FSDP unit names a
    run is checked against its plan by, and what the engine's ranks run; absent where
    the model config cannot be read here)."""
    digest = model_config_digest(spec)
    resolved = resolved_job(spec)
    return {
        "fsdpspec_version": __version__,
        "content_hash": content_hash(spec),
        **({MODEL_CONFIG_DIGEST: digest} if digest else {}),  # only with a config.json
        "run_dir": str(run_dir.resolve()),
        "spec": spec.as_json_data(),
        **({"job": job_record(resolved)} if resolved else {}),
    }


def write_resolved_spec(spec: JobSpec, run_dir: Path) -> Path:
    """Write run_dir/resolved-spec.json atomically (temp file, fsync, rename)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / FILENAME
    write_text(target, json.dumps(resolved_document(spec, run_dir), indent=2) + "\n")
    return target


RESOLVED_LIMITS = Limits(max_bytes=4 << 20, max_depth=16, max_string=1 << 16)


def read_resolved_spec(path: Path) -> tuple[JobSpec, Path, dict[str, Any]]:
    """(spec, run_dir, the whole document) from a resolved-spec.json; JsonFileError
    (one line naming it) for anything that is not one."""
    document = load_object(Path(path), RESOLVED_LIMITS)
    spec, run_dir = document.get("spec"), document.get("run_dir")
    if not isinstance(spec, dict) or not isinstance(run_dir, str):
        raise JsonFileError(f"{path}: not a resolved spec (no spec and run_dir)")
    try:
        return JobSpec.model_validate(spec), Path(run_dir), document
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise JsonFileError(f"{path}: not a valid spec: {where}: {first['msg']}") from None


def read_resolved_job(path: Path) -> tuple[Job, Path]:
    """(the recorded job, run_dir) of a resolved-spec.json: what every rank of the engine
    runs, resolved once by the launcher. Checked once against the spec it came from: the
    same fsdpspec derived it (another version may derive otherwise) from this very spec
    (its content hash). JsonFileError (one line naming the file) otherwise."""
    spec, run_dir, document = read_resolved_spec(path)
    if document.get("fsdpspec_version") != __version__:
        raise RecordError(f"{path}: written by fsdpspec {document.get('fsdpspec_version')}, "
                          f"not {__version__}: `fsdpspec run` writes it again")
    if document.get("content_hash") != content_hash(spec):
        raise RecordError(f"{path}: the recorded job is not its spec's (content_hash "
                          "differs): `fsdpspec run` writes it again")
    if "job" not in document:
        raise RecordError(f"{path}: records no job (the model config could not be read "
                          "when it was written): `fsdpspec run` writes it again")
    return job_from_record(spec, document["job"], _ROOT, Path(path)), run_dir
