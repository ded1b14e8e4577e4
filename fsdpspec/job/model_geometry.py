"""A model's geometry for every model_type: analytic for a registered family, else
introspected once on the meta device and cached on disk by the config's sha256.

The cache lets `validate` give a memory verdict for a model it cannot count without
torch: `fsdpspec plan` (or `validate`) on a machine with the train extra fills it, in
the user's cache directory (a run records the geometry in its resolved spec); a
registered family never touches it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from fsdpspec.catalog.families import Moe
from fsdpspec.job.geometry import Experts, Geometry, UnknownFamilyError, geometry_from_config
from fsdpspec.job.tree import Node

# Bumped when the cached form changes: older entries are then computed again.
CACHE_VERSION = 5


def config_digest(config: dict[str, Any]) -> str:
    """sha256 of the config's canonical JSON (key order and spacing do not matter)."""
    import hashlib  # OpenSSL's import (4 ms of `validate`) only where a model is introspected

    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME/fsdpspec/models, else ~/.cache/fsdpspec/models."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "fsdpspec" / "models"


def _cache_file(config: dict[str, Any]) -> Path:
    return user_cache_dir() / f"{config_digest(config)}.json"


def _to_json(g: Geometry, digest: str) -> dict[str, Any]:
    fields = {f.name: getattr(g, f.name) for f in dataclasses.fields(g)}
    fields["built_tree"] = g.built_tree.as_json() if g.built_tree else None
    fields["experts"] = dataclasses.asdict(g.experts) if g.experts else None
    return {"version": CACHE_VERSION, "config_sha256": digest, "geometry": fields}


def _from_json(data: Any, digest: str) -> Geometry | None:
    """The cached geometry, or None for an entry of another version, config or shape."""
    try:
        if data["version"] != CACHE_VERSION or data["config_sha256"] != digest:
            return None
        fields = dict(data["geometry"])
        fields["built_tree"] = Node.from_json(fields["built_tree"])
        fields["experts"] = experts_from_json(fields["experts"])
        for key in ("built_layer", "built_root"):
            fields[key] = tuple((n, tuple(s)) for n, s in fields[key])
        for key in ("norm_names", "built_layer_classes", "peft_expert_names"):
            fields[key] = tuple(fields[key])
        return Geometry(**fields)
    except (KeyError, TypeError, ValueError):
        return None


def experts_from_json(data: dict[str, Any] | None) -> Experts | None:
    """`Experts` from `dataclasses.asdict` (its family block nested)."""
    if data is None:
        return None
    block = {key: as_tuples(value) for key, value in data["block"].items()}
    return Experts(**{**data, "block": Moe(**block)})


def as_tuples(value: Any) -> Any:
    """``value`` read from JSON with its lists as the tuples the frozen records hold."""
    return tuple(as_tuples(item) for item in value) if isinstance(value, list) else value


def cached_geometry(config: dict[str, Any]) -> Geometry | None:
    """The introspected geometry of ``config`` from the user's cache; None when it holds
    none (an unreadable entry counts as absent)."""
    digest = config_digest(config)
    try:
        return _from_json(json.loads(_cache_file(config).read_text(encoding="utf-8")), digest)
    except (OSError, ValueError):
        return None


def store_geometry(config: dict[str, Any], g: Geometry) -> None:
    """Cache an introspected geometry in the user's cache. A cache that cannot be
    written is skipped: it only saves time."""
    from fsdpspec.atomicio import write_text  # shutil and tempfile: only when caching

    path = _cache_file(config)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(_to_json(g, config_digest(config))) + "\n")
    except OSError:
        pass


def model_geometry(config: dict[str, Any]) -> Geometry:
    """The analytic geometry of ``config``; for a model_type without a family, the cached
    or (torch importable) freshly introspected geometry. Raises GeometryError, and
    NotIntrospected when the model has neither a family, a cache entry nor torch."""
    try:
        return geometry_from_config(config)
    except UnknownFamilyError:
        pass
    cached = cached_geometry(config)
    if cached is not None:
        return cached
    from fsdpspec.job.introspect import introspected_geometry

    g = introspected_geometry(config)
    store_geometry(config, g)
    return g
