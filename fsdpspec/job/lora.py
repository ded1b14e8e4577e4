"""A job's LoRA in the planner's terms: which projections of a layer carry adapters, and
the adapter tensors' shapes (the memory terms are `fsdpspec.plan.adapters`')."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsdpspec.catalog.families import FAMILIES
from fsdpspec.catalog.modelconfig import lora_targets
from fsdpspec.job.geometry import Geometry, Shape
from fsdpspec.spec.v1 import JobSpec

# QLoRA's NF4 (the QLoRA paper's, bitsandbytes' and torchao's layout): one absmax per 64
# weights; double quantisation stores the absmaxes in 8 bits with one scale per 256.
NF4_BLOCK, NF4_SCALER_BLOCK = 64, 256

# The planner's names of the projections an adapter can go on.
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj",
                "gate_up_proj", "down_proj")


def _planned_name(tensor: str) -> str:
    """``self_attn.q_proj.weight`` → ``q_proj``."""
    return tensor.rsplit(".", 2)[-2]


def adapted_linears(g: Geometry, targets: tuple[str, ...]) -> list[tuple[str, Shape]]:
    """The projections of one decoder layer that ``targets`` adapt, as (planner's name,
    (out, in)); ``lm_head`` is counted with the root (`Adapters.root_shapes`)."""
    fam = FAMILIES.get(g.family)
    out = []
    for name, shape in g.layer_tensors():
        if not name.endswith(".weight") or len(shape) != 2 or ".experts." in name:
            continue
        planned = _planned_name(name)
        real = fam.projection_name(planned) if fam else planned
        if planned in _PROJECTIONS and real in targets:
            out.append((planned, shape))
    return out


def quantised_projections(g: Geometry) -> list[tuple[str, Shape]]:
    """The weights of one decoder layer that QLoRA stores in 4 bits, as (transformers'
    module name, (out, in)): every Linear projection, adapted or not (the planner's
    ``*_proj`` names; not the router, nor a Mixture of Experts' stacked experts, which
    are not Linear modules, nor lm_head, which is outside the layers)."""
    fam = FAMILIES.get(g.family)
    out = []
    for name, shape in g.layer_tensors():
        planned = _planned_name(name) if name.endswith(".weight") else ""
        if planned in _PROJECTIONS and len(shape) == 2 and ".experts." not in name:
            out.append((fam.projection_name(planned) if fam else planned, shape))
    return out


@dataclass(frozen=True)
class Adapters:
    """The LoRA of a job, in the planner's terms."""

    method: str
    r: int
    dropout: float
    # The adapted projections of one layer: (planner's name, (out, in)).
    linears: tuple[tuple[str, Shape], ...]
    head: bool  # lm_head carries an adapter
    saves_head: bool  # lm_head is trained in full (modules_to_save)
    saves_embed: bool
    double_quant: bool
    merged: bool  # the final export merges the adapters into a full model

    def layer_shapes(self) -> list[Shape]:
        """A (r × in) and B (out × r) of each adapted projection of one layer."""
        return [s for _, (out, into) in self.linears for s in ((self.r, into), (out, self.r))]

    def root_shapes(self, g: Geometry) -> list[Shape]:
        """Trainable tensors outside the layers: lm_head's adapter, full copies of the
        modules to save."""
        head = [(self.r, g.hidden_size), (g.vocab_size, self.r)] if self.head else []
        copies = [(g.vocab_size, g.hidden_size)] * (self.saves_head + self.saves_embed)
        return head + copies


def targets_of(spec: JobSpec, config: dict[str, Any] | None) -> tuple[str, ...]:
    """The modules the spec's LoRA adapts, by transformers' names (`peft.target_modules`,
    else the family's projections; empty without a `peft` section, or for a model whose
    family has no default targets, which FS141 reports)."""
    peft = spec.peft
    return () if peft is None else tuple(lora_targets(peft.target_modules, config))


def adapters_of(spec: JobSpec, g: Geometry, targets: tuple[str, ...]) -> Adapters | None:
    """The spec's LoRA on geometry ``g`` (None without a `peft` section)."""
    peft = spec.peft
    if peft is None:
        return None
    return Adapters(
        method=peft.method, r=peft.r, dropout=peft.dropout,
        linears=tuple(adapted_linears(g, targets)), head="lm_head" in targets,
        saves_head="lm_head" in peft.modules_to_save,
        saves_embed="embed_tokens" in peft.modules_to_save,
        double_quant=peft.quantization.double_quant, merged=peft.merged,
    )
