"""The Job as resolved-spec.json records it, and read back.

The launcher resolves the job once (`fsdpspec.job.resolve`) and records it; every rank
of the engine loads the record instead of resolving again, so each rank runs the layout,
units and model the plan described. The record holds what resolving derived: the layout
(named degrees, batch), the model's config and geometry (without the module tree: the
units are recorded), the FSDP units and the LoRA adapters.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from fsdpspec.job.batch import Batch
from fsdpspec.job.geometry import Geometry
from fsdpspec.job.job import Job
from fsdpspec.job.layout import Layout
from fsdpspec.job.lora import Adapters, Matched
from fsdpspec.job.model_geometry import as_tuples, experts_from_json
from fsdpspec.job.parallel import ParallelDims
from fsdpspec.job.units import Unit, Units
from fsdpspec.jsonfile import RecordError
from fsdpspec.spec.v1 import JobSpec


def job_record(job: Job) -> dict[str, Any]:
    """What resolved-spec.json's `job` section holds (`Job.as_json` and the model)."""
    g = job.geometry
    return {**job.as_json(), "model": {
        "config": job.config,
        "geometry": None if g is None else _geometry_json(g),
        "units": None if job.units is None else _units_json(job.units),
        "adapters": None if job.adapters is None else dataclasses.asdict(job.adapters)}}


def job_from_record(spec: JobSpec, record: Any, base_dir: Path, where: Path) -> Job:
    """The job ``record`` (read from ``where``) holds for ``spec``, the spec it was
    resolved from, which the caller checked; RecordError for a record of another shape."""
    try:
        model = record["model"]
        geometry = None if model["geometry"] is None else _geometry(model["geometry"])
        return Job(spec=spec, base_dir=base_dir, config=model["config"], geometry=geometry,
                   geometry_error=None, layout=_layout(record["layout"]),
                   units=None if model["units"] is None else _units(model["units"]),
                   adapters=None if model["adapters"] is None else _adapters(model["adapters"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{where}: the recorded job is not one this fsdpspec writes "
                          f"({exc!r})") from None


def _layout(data: dict[str, Any]) -> Layout:
    degrees, batch = data["dims"], data["batch"]
    dims = ParallelDims(world_size=data["world_size"], dp_replicate=degrees["dp_replicate"],
                        dp_shard=degrees["dp_shard"], written_strategy=degrees["written_strategy"],
                        strategy=data["strategy"], requested_shard=degrees["requested_shard"],
                        cp=degrees["cp"], tp=degrees["tp"], pp=degrees["pp"], ep=degrees["ep"])
    layout = Layout(dims=dims, batch=Batch(micro=batch["micro"], seq=batch["seq"],
                                           global_size=batch["global"], dp_size=dims.dp_size,
                                           cp=dims.cp, per_example=batch["per_example"]),
                    gpus_per_node=data["gpus_per_node"], fsdp_version=data["fsdp_version"],
                    synced_micro_batches=data["synced_micro_batches"], ddp=data["ddp"])
    if layout.as_json() != data:  # the derived facts recorded beside the degrees agree
        raise ValueError("layout")
    return layout


def _geometry_json(g: Geometry) -> dict[str, Any]:
    fields = {f.name: getattr(g, f.name) for f in dataclasses.fields(g)}
    fields["built_tree"] = None  # the units are recorded: the engine walks no tree
    fields["experts"] = dataclasses.asdict(g.experts) if g.experts else None
    return fields


def _geometry(data: dict[str, Any]) -> Geometry:
    fields = dict(data)
    fields["experts"] = experts_from_json(fields["experts"])
    for key in ("built_layer", "built_root"):
        if fields[key] is not None:
            fields[key] = tuple((n, tuple(s)) for n, s in fields[key])
    for key in ("norm_names", "built_layer_classes", "peft_expert_names"):
        fields[key] = tuple(fields[key])
    return Geometry(**fields)


def _shapes(data: list) -> tuple:
    return tuple((tuple(s), n) for s, n in data)


def _unit_json(unit: Unit) -> dict[str, Any]:
    return {"name": unit.name, "shapes": [[list(s), n] for s, n in unit.shapes],
            "count": unit.count, "layers": unit.layers,
            "experts": [[list(s), n] for s, n in unit.experts]}


def _unit(data: dict[str, Any]) -> Unit:
    return Unit(name=data["name"], shapes=_shapes(data["shapes"]), count=data["count"],
                layers=data["layers"], experts=_shapes(data["experts"]))


def _units_json(units: Units) -> dict[str, Any]:
    return {"units": [_unit_json(u) for u in units.units], "root": _unit_json(units.root),
            "layers": [list(layer) for layer in units.layers], "ac_mode": units.ac_mode,
            "ac_every": units.ac_every, "experts": [list(e) for e in units.experts]}


def _units(data: dict[str, Any]) -> Units:
    return Units(units=tuple(_unit(u) for u in data["units"]), root=_unit(data["root"]),
                 layers=tuple((p, n) for p, n in data["layers"]), ac_mode=data["ac_mode"],
                 ac_every=data["ac_every"],
                 experts=tuple((p, n) for p, n in data["experts"]))


def _adapters(data: dict[str, Any]) -> Adapters:
    fields = {key: as_tuples(value) for key, value in data.items()}
    fields["matched"] = Matched(**{key: as_tuples(value)
                                   for key, value in data["matched"].items()})
    return Adapters(**fields)
