"""`resolve(spec, base_dir) -> Job`: every fact of a job derived from its spec once.

The planner, the lint rules, the runners and the engine read the `Job` instead of
re-deriving from the raw spec (copies drift: the size policy, the MFU of introspected
models and the accumulation steps did). Torch-free, except that a model without an
analytic family is introspected on the meta device (`fsdpspec.job.introspect`).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdpspec.catalog.config_source import (
    hub_input,
    model_config,
    resolve_input_path,
)
from fsdpspec.catalog.families import family
from fsdpspec.job.batch import Batch
from fsdpspec.job.float8 import Float8, float8_of
from fsdpspec.job.geometry import Geometry, GeometryError
from fsdpspec.job.layout import Layout, layout
from fsdpspec.job.lora import Adapters, adapters_of, targets_of
from fsdpspec.job.model_geometry import model_geometry
from fsdpspec.job.rundir import RunDir
from fsdpspec.job.units import Units, Wrap, choose_units, geometry_tree
from fsdpspec.semantics import DTYPE_BYTES, OPTIMIZER_STATES, model_flops_per_token
from fsdpspec.spec.v1 import JobSpec


@dataclass(frozen=True)
class Job:
    """A spec and everything derived from it (see the module docstring)."""

    spec: JobSpec
    base_dir: Path
    # The model's HF-style config (None: a factory model without geometry, or an
    # hf_config path that does not exist here, which FS407 reports).
    config: dict[str, Any] | None
    geometry: Geometry | None
    # Why there is no geometry (a config the planner cannot count, or a model that
    # could not be introspected); None when there is one or nothing to count.
    geometry_error: GeometryError | None
    layout: Layout
    # The FSDP units by module name (None without a geometry). For a factory model they
    # are sized from its `model.geometry`; the engine names them from the built module.
    units: Units | None
    # A LoRA / QLoRA fine-tune's adapters on the geometry (None: every parameter trains,
    # or there is no geometry to place them on).
    adapters: Adapters | None

    @property
    def batch(self) -> Batch:
        """Micro-batch, sequence, global batch and accumulation (`Layout.batch`)."""
        return self.layout.batch

    @property
    def builds_transformers_model(self) -> bool:
        """The engine builds the model with transformers (preset or hf_config), whose
        module names the units carry."""
        return self.spec.model.factory is None

    @property
    def rundir(self) -> RunDir:
        return RunDir(Path(self.spec.run_dir()))

    @property
    def inputs(self) -> list[tuple[str, str, bool, str | None]]:
        """(pointer, path as written, must be a directory, the Hub repo type it may
        name): the input table validate, pre-flight and the run identity check."""
        return self.spec.input_paths()

    @property
    def lora_targets(self) -> tuple[str, ...]:
        """The modules a LoRA adapts, by transformers' names (empty without `peft`)."""
        return targets_of(self.spec, self.config)

    @functools.cached_property  # tune plans thousands of candidates of one job each
    def float8(self) -> Float8 | None:
        """The Linear modules float8 training converts and how FSDP gathers them (None
        without a `float8` section)."""
        return float8_of(self.spec.float8, self.geometry, self.layout)

    @property
    def attention(self) -> str:
        """The attention implementation the engine builds: the spec's, or for `auto` what
        transformers picks for the model (sdpa without a geometry to ask: a factory
        model, whose own code decides)."""
        written = self.spec.model.attention
        if written != "auto":
            return written
        return self.geometry.auto_attention if self.geometry is not None else "sdpa"

    @property
    def compute_bytes(self) -> int:
        return DTYPE_BYTES[self.spec.fsdp.mixed_precision.param_dtype]

    @property
    def reduce_bytes(self) -> int:
        return DTYPE_BYTES[self.spec.fsdp.mixed_precision.reduce_dtype]

    @property
    def export_bytes(self) -> int:
        """Bytes per element of the final export (0: none is written)."""
        final = self.spec.checkpoint.final
        return DTYPE_BYTES[final.dtype] if final.enabled else 0

    @property
    def export_shard_bytes(self) -> int:
        return self.spec.checkpoint.final.max_shard_mb * 10**6

    @property
    def optimizer_states(self) -> int:
        """Optimizer states per parameter (plain SGD keeps none)."""
        opt = self.spec.optimizer
        return 0 if opt.name == "sgd" and opt.momentum == 0 else OPTIMIZER_STATES[opt.name]

    @property
    def optimizer_state_dtype(self) -> str:
        """The dtype AdamW keeps its moments in (`optimizer.state_dtype`); other
        optimizers keep fp32 state."""
        opt = self.spec.optimizer
        return opt.state_dtype if opt.name == "adamw" else "float32"

    def flops_per_token(self) -> float | None:
        """MFU's FLOPs per token (`semantics.model_flops_per_token`): the parameters one
        token passes through (a Mixture of Experts: its active ones); None without a
        geometry."""
        g = self.geometry
        if g is None:
            return None
        return model_flops_per_token(parameters=g.active_params, num_layers=g.num_layers,
                                     q_width=g.q_width, seq_len=self.batch.seq)

    def at_world(self, world_size: int) -> Job:
        """The same job on another number of ranks (the units do not change)."""
        return dataclasses.replace(self, layout=layout(self.spec, world_size))

    def with_spec(self, spec: JobSpec) -> Job:
        """Another spec for the same model (a suggestion's override, a `fsdpspec tune`
        candidate), on the same ranks. The units are chosen again only when the spec
        wraps the model differently (tune plans thousands of specs of one model)."""
        units = self.units
        g = self.geometry
        if g is not None and _wrap(spec, g) != _wrap(self.spec, g):
            units = job_units(spec, g)
        return dataclasses.replace(self, spec=spec, layout=layout(spec, self.layout.world_size),
                                   units=units,
                                   adapters=job_adapters(spec, g, self.config))

    def as_json(self) -> dict[str, Any]:
        """The resolved layout, attention and unit names, recorded in resolved-spec.json."""
        units = self.units if self.builds_transformers_model else None
        return {"layout": self.layout.as_json(), "attention": self.attention,
                "units": None if units is None else {
                    "policy": self.spec.fsdp.auto_wrap_policy,
                    "names": list(units.names()),
                    "checkpointed": list(units.checkpointed())}}


def wrap_of(spec: JobSpec, classes: list[str] | tuple[str, ...]) -> Wrap:
    """What decides a spec's units, given the decoder layer classes."""
    fsdp = spec.fsdp
    return Wrap(policy=fsdp.auto_wrap_policy, min_num_params=fsdp.min_num_params,
                layer_classes=tuple(classes), ac_mode=fsdp.activation_checkpointing,
                ac_every=fsdp.ac_every,
                # Op-level checkpointing replays a layer's ops by count: an FSDP unit
                # inside it all-gathers again in the recomputation (its profiler ops
                # then outnumber the forward's, and torch stops the backward).
                whole_checkpointed=fsdp.version == 1 or fsdp.activation_checkpointing == "op")


def decoder_layer_classes(spec: JobSpec, g: Geometry) -> list[str]:
    """`fsdp.transformer_layer_cls`, else the family's decoder layer, else the classes an
    introspected model declares unsplittable."""
    found = family(g.family)
    inferred = [found.layer_class] if found else list(g.built_layer_classes)
    return list(spec.fsdp.transformer_layer_cls) or inferred or ["DecoderLayer"]


def _wrap(spec: JobSpec, g: Geometry) -> Wrap:
    return wrap_of(spec, decoder_layer_classes(spec, g))


def job_units(spec: JobSpec, g: Geometry | None) -> Units | None:
    if g is None:
        return None
    return units_of(g, _wrap(spec, g))


# Cached: `fsdpspec tune` varies checkpointing (part of the wrap) over thousands of
# candidates of one geometry.
@functools.lru_cache(maxsize=256)
def units_of(g: Geometry, wrap: Wrap) -> Units:
    """The units ``wrap`` makes of the model ``g`` (its built tree, else its family's)."""
    tree = g.built_tree if g.built_tree is not None else geometry_tree(g)
    return choose_units(tree, wrap)


def job_adapters(spec: JobSpec, g: Geometry | None,
                 config: dict[str, Any] | None) -> Adapters | None:
    return None if g is None else adapters_of(spec, g, targets_of(spec, config))


def read_model_config(spec: JobSpec, base_dir: Path) -> dict[str, Any] | None:
    """The model's config; None when hf_config names a path that does not exist, which
    FS407 reports (ignorably: a spec may be written for another machine's paths).
    ModelConfigError for a config that cannot be read."""
    hf_config = spec.model.hf_config
    if (hf_config is not None and hub_input(hf_config, base_dir) is None
            and not resolve_input_path(hf_config, base_dir).exists()):
        return None
    return model_config(spec.model, base_dir)


def resolve(spec: JobSpec, base_dir: Path, *, world_size: int | None = None,
            config: dict[str, Any] | None = None, geometry: Geometry | None = None) -> Job:
    """The job of ``spec`` (input paths relative to ``base_dir``), optionally on another
    number of ranks; ``config`` / ``geometry`` when the caller read them already.
    Raises ModelConfigError for a model config that cannot be read."""
    if config is None:
        config = read_model_config(spec, base_dir)
    error = None
    if geometry is None and config is not None:
        try:
            geometry = model_geometry(config)
        except GeometryError as exc:
            error = exc
    return Job(spec=spec, base_dir=base_dir, config=config, geometry=geometry,
               geometry_error=error, layout=layout(spec, world_size),
               units=job_units(spec, geometry), adapters=job_adapters(spec, geometry, config))
