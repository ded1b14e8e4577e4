"""The validation pipeline: load → overrides → version dispatch → pydantic (and the JSON
Schema's words when it refuses) → invariants → lint rules → positions. Every problem in
the file is collected as a diagnostic; only a malformed --set raises (OverrideError, a
usage error)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdpspec.catalog.config_source import ModelConfigError, hub_input
from fsdpspec.catalog.hub import HubError, offline, snapshot
from fsdpspec.job.introspect import NotIntrospected
from fsdpspec.job.job import Job, resolve
from fsdpspec.job.model_geometry import user_cache_dir
from fsdpspec.lint import lint_spec
from fsdpspec.lint.registry import LintContext
from fsdpspec.spec import LATEST, SUPPORTED
from fsdpspec.spec.diagnostics import Diagnostic, Severity, error, sort_key
from fsdpspec.spec.did_you_mean import closest
from fsdpspec.spec.load import Loaded, SourceMap, load_file
from fsdpspec.spec.overrides import apply_overrides
from fsdpspec.spec.structure import by_hand_invariants, check_structure
from fsdpspec.spec.v1 import MODEL_HUB_INPUTS, JobSpec


@dataclass
class FileReport:
    """Everything known about one spec file after validation."""

    file: str
    text: str
    base_dir: Path
    source_map: SourceMap
    diagnostics: list[Diagnostic] = field(default_factory=list)
    spec: JobSpec | None = None
    # The resolved job (set once the spec is valid and its model config readable).
    job: Job | None = None

    @property
    def model_config(self) -> dict[str, Any] | None:
        return self.job.config if self.job is not None else None

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)


def _dispatch(data: dict[str, Any]) -> list[Diagnostic]:
    """apiVersion and kind, checked first: they decide which schema applies."""
    supported = ", ".join(SUPPORTED)
    version = data.get("apiVersion")
    if version is None:
        return [error("FS013", "missing apiVersion", "/apiVersion",
                      f"add `apiVersion: {LATEST}` (supported: {supported})")]
    if not isinstance(version, str) or version not in SUPPORTED:
        guess = closest(str(version), SUPPORTED)
        hint = f"did you mean {guess!r}?" if guess else f"supported: {supported}"
        return [error("FS013", f"unsupported apiVersion {version!r}; supported: {supported}",
                      "/apiVersion", hint)]
    if data.get("kind") != "TrainingJob":
        found = data.get("kind")
        message = "missing kind" if found is None else f"kind {found!r} is not TrainingJob"
        return [error("FS014", message, "/kind", "write `kind: TrainingJob`")]
    return []


def _structural(data: dict[str, Any]) -> tuple[JobSpec | None, list[Diagnostic]]:
    found = _dispatch(data)
    if found:
        return None, found
    return check_structure(data, data["apiVersion"])


def _explicit(source_map: SourceMap) -> set[str]:
    return set(source_map.values) | set(source_map.overrides)


def _lint(report: FileReport, select: Sequence[str], ignore: Sequence[str]) -> list[Diagnostic]:
    spec = report.spec
    assert spec is not None
    try:
        report.job = resolve(spec, report.base_dir)
    except ModelConfigError as exc:
        pointer = "/model/hf_config"
        return [error("FS030", str(exc), pointer, "point hf_config at a local config.json")]
    ctx = LintContext(report.job, _explicit(report.source_map))
    return (_unplanned(report) + _uncached_hub_inputs(spec, report.base_dir)
            + lint_spec(ctx, select=select, ignore=ignore))


def _unplanned(report: FileReport) -> list[Diagnostic]:
    """FS032 when the memory rules cannot run: a model without an analytic family whose
    geometry is neither cached nor computable (no torch). Never a silent pass."""
    job = report.job
    assert job is not None
    if not isinstance(job.geometry_error, NotIntrospected):
        return []
    assert job.config is not None
    message = (f"model_type {job.config.get('model_type')!r} has no analytic family and its "
               "geometry is not cached: the memory rules (FS201-FS203) did not run")
    hint = (f"pip install 'fsdpspec[train]' and run `fsdpspec plan {report.file}` once: "
            f"it caches the geometry in {user_cache_dir()}")
    return [Diagnostic("FS032", Severity.WARNING, message, "/model/hf_config", hint)]


def _uncached_hub_inputs(spec: JobSpec, base_dir: Path) -> list[Diagnostic]:
    """FS031 for weights or a tokenizer named by a Hub id that is not cached: an error
    offline; online a warning, as `fsdpspec run` fetches it (hf_config is FS030: the
    plan needs it now)."""
    found = []
    for source in MODEL_HUB_INPUTS:
        value = source.value(spec)
        hub = hub_input(value, base_dir) if value and source.name != "model.hf_config" else None
        if hub is None:
            continue
        try:
            snapshot(hub)
        except HubError as exc:
            severity = Severity.ERROR if offline() else Severity.WARNING
            found.append(Diagnostic("FS031", severity, str(exc), source.pointer))
    return found


def _place(report: FileReport, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    placed = []
    for d in diagnostics:
        if d.position is not None:
            placed.append(d)
            continue
        file, position = report.source_map.locate(d.path, key=d.on_key)
        placed.append(d.at(file, position))
    return sorted(placed, key=sort_key)


def check_file(
    path: Path,
    overrides: Sequence[str] = (),
    *,
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
) -> FileReport:
    """Validate one spec file. Raises only OverrideError (a usage error)."""
    return check_loaded(load_file(path), path, overrides, select=select, ignore=ignore)


def check_loaded(
    loaded: Loaded,
    path: Path,
    overrides: Sequence[str] = (),
    *,
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
) -> FileReport:
    """Validate a spec file already read (`load_file`, which it consumes: the overrides
    change its data) from ``path``. `fsdpspec tune` validates many variants of one file."""
    # realpath, unlike Path.resolve, never raises (a symlink loop is reported by the load).
    report = FileReport(loaded.file, loaded.text, Path(os.path.realpath(path)).parent,
                        loaded.source_map, loaded.diagnostics)
    if loaded.data is None:
        return report
    apply_overrides(loaded.data, list(overrides), loaded.source_map)
    spec, found = _structural(loaded.data)
    if spec is not None and not any(d.is_error for d in found):
        report.spec = spec
        found += _lint(report, select, ignore)
    report.diagnostics = _place(report, found)
    return report


def check_by_hand(report: FileReport) -> FileReport:
    """Add what launching the valid spec by hand (`fsdpspec run`) needs beyond what an
    export needs, positioned like every other diagnostic."""
    assert report.spec is not None
    report.diagnostics = _place(report, [*report.diagnostics,
                                         *by_hand_invariants(report.spec)])
    return report
