"""The one importer core: the v1 spec a source format's values add up to, written as a
commented YAML document.

Each source module (accelerate, trainer, axolotl, torchtitan) reads its own file into a
Draft: dotted v1 field → (value, the source line it came from), the keys it did not
carry (with line and why), and the features it refuses (the spec cannot say them). This
module then fills what the source does not say (model, GPU, host memory, process count)
as marked assumptions, checks the layer class against the model, plans the job, and
has the YAML emitter write the document, once `written` has checked it is a valid spec
that reads back as built. Nothing is written when anything is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from fsdpspec.catalog.families import family
from fsdpspec.convert.draft import Assumptions, Draft, Entry, ImportRefused, Note, note_order
from fsdpspec.convert.model_choice import apply_layers, apply_model
from fsdpspec.convert.written import (
    MEMORY_RULES,
    check_written,
    refuse_invalid,
    refuse_unwritable,
    refuse_validated,
)
from fsdpspec.semantics import HYBRID_STRATEGIES
from fsdpspec.spec.section import Section, is_section
from fsdpspec.spec.v1 import API_VERSION, Data, JobSpec
from fsdpspec.spec.yamltext import add_comment, dump_yaml, set_header

# Host RAM is in no source config; GPU servers carry about this much per GPU.
HOST_GIB_PER_GPU = 128


@dataclass
class Imported:
    """The v1 spec text, what was left behind, and the fields the text says (dotted
    field → value: what the import meant to write)."""

    text: str
    notes: list[Note]
    fields: dict[str, Any]


def _spec_order(dotted: str) -> tuple[int, ...]:
    """Sections, and fields in them, in the order the models declare them."""
    model: Any = JobSpec
    order = []
    for name in dotted.split("."):
        types = model.field_types()
        names = list(types)
        order.append(names.index(name) if name in names else len(names))
        model = _section(types.get(name))
        if model is None:
            break
    return tuple(order)


def _section(annotation: Any) -> type[Section] | None:
    """The section a field holds (alone, or in a union)."""
    for arg in (annotation, *getattr(annotation, "__args__", ())):
        if is_section(arg):
            return arg
    return None


def _nest(fields: dict[str, tuple[Any, str]]) -> CommentedMap:
    root = CommentedMap()
    for dotted in sorted(fields, key=_spec_order):
        value, comment = fields[dotted]
        *parents, last = dotted.split(".")
        node = root
        for name in parents:
            node = node.setdefault(name, CommentedMap())
        node[last] = value
        if comment:
            add_comment(node, last, comment)
    return root


def _document(draft: Draft, tool: str, kind: str, source: str) -> CommentedMap:
    """The spec document: a header, then the draft's fields in the models' order."""
    document = CommentedMap(apiVersion=API_VERSION, kind="TrainingJob")
    set_header(document, f"Imported from the {tool} config {source} by `fsdpspec import {kind}`.",
               "Values marked 'assumed' or 'not in the source' are fsdpspec's guesses: check "
               "them.")
    document.update(_nest(draft.fields))
    return document


def _plain(document: CommentedMap) -> dict[str, Any]:
    return json.loads(json.dumps(document))


def _resources(draft: Draft, tool: str, assumed: Assumptions) -> None:
    if not draft.has("resources.nodes"):
        draft.put("resources.nodes", 1, f"assumed: {tool} configs do not say")
    if not draft.has("resources.gpus_per_node"):
        draft.put("resources.gpus_per_node", assumed.gpus_per_node,
                  f"assumed ({tool} configs do not say): --gpus-per-node")
    if not draft.has("resources.accelerator"):
        draft.put("resources.accelerator", assumed.accelerator,
                  "not in the source: the GPU you run on (--accelerator)")
    if draft.value("resources.accelerator") != "cpu":
        per_node = draft.value("resources.gpus_per_node")
        draft.put("resources.host_memory_gib", HOST_GIB_PER_GPU * per_node,
                  f"assumed {HOST_GIB_PER_GPU} GiB per GPU: set your nodes' RAM")
    if draft.value("resources.nodes") > 1 and not draft.has("launch.rdzv_endpoint"):
        draft.notes.append(Note(None, (
            f"{draft.value('resources.nodes')} nodes and no rendezvous host in the source: "
            "set launch.rdzv_endpoint (the first node's host:port) before `fsdpspec run`")))


def _batch(draft: Draft) -> None:
    """A source that does not say the global batch gets the spec's default, rounded
    to a whole number of micro batches on every rank (FS501 would otherwise blame the
    user's file for our default)."""
    if draft.has("data.global_batch_size"):
        return
    defaults = Data()
    micro = draft.value("data.micro_batch_size", defaults.micro_batch_size)
    ranks = draft.data_parallel_ranks(draft.value("resources.gpus_per_node")
                                      * draft.value("resources.nodes"))
    default, step = defaults.global_batch_size, micro * ranks
    if step > 0 and default % step:  # no ranks: validating the draft says so (FS054)
        draft.put("data.global_batch_size", step * max(1, round(default / step)),
                  f"assumed (the source does not say): the multiple of {micro} per rank × "
                  f"{ranks} data-parallel ranks nearest the spec's default {default}")


def _original_params(draft: Draft) -> None:
    """FSDP1 with use_orig_params false, which accelerate and the Trainer run and
    fsdpspec's engine cannot: the import writes use_orig_params: true, which trains the
    same model, and says so.

    Under activation checkpointing the engine could not checkpoint it (FS903). torch
    can: measured on 2 gloo ranks, FSDP.optim_state_dict saves and loads it whichever
    way the layers are wrapped, and torch.distributed.checkpoint's get_state_dict does
    when the checkpoint wrapper goes inside each FSDP unit after wrapping (accelerate's
    order), but not when the layers are wrapped before FSDP (the engine's order,
    torchtitan's); the parameter memory is the same. Under LoRA, peft gives accelerate a
    wrap policy that puts the adapters in units of their own; the engine wraps layers,
    which then hold frozen and trained weights together, and a flat parameter needs one
    requires_grad (FS142); the plan counts the memory of the engine's layout."""
    if draft.value("fsdp.version") != 1 or draft.value("fsdp.use_orig_params") is not False:
        return
    groups = _hybrid_groups(draft)
    if draft.has("peft.method"):
        why, effect, same = "LoRA adapters", ("frozen and trained weights in one FSDP unit "
                                              "need it (FS142)"), "the same model"
    elif draft.value("fsdp.activation_checkpointing", "none") != "none":
        why, effect, same = "activation checkpointing", (
            "fsdpspec's engine could not load this run's checkpoints (FS903)"), \
            "the same model with the same memory"
    elif groups > 1:
        why, effect, same = f"{groups} hybrid shard groups", (
            "torch fails at the first checkpoint (FS904)"), "the same model"
    else:
        return
    source = draft.sources.get("fsdp.use_orig_params")
    line = source.at if source is not None else None
    draft.put("fsdp.use_orig_params", True,
              f"{draft.fields['fsdp.use_orig_params'][1]}: false, with {why}: {effect}")
    draft.notes.append(Note(line, (
        f"use_orig_params false with {why}: {effect}; wrote fsdp.use_orig_params: true, "
        f"which trains {same}")))


def _guessed(draft: Draft, dotted: str) -> bool:
    """Whether a field holds fsdpspec's own guess (the header's contract: its comment
    starts so), not a value of the source."""
    return draft.fields.get(dotted, (None, ""))[1].startswith(("assumed", "not in the source"))


def _hybrid_groups(draft: Draft) -> int:
    """The shard groups of a hybrid strategy (1 for any other, or sizes not yet whole)."""
    per_node, nodes = draft.value("resources.gpus_per_node"), draft.value("resources.nodes")
    group = draft.value("fsdp.shard_group_size") or per_node
    if draft.value("fsdp.sharding_strategy") not in HYBRID_STRATEGIES or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0
            for n in (per_node, nodes, group)):
        return 1
    return per_node * nodes // group


def _planned(plain: dict[str, Any], base_dir: Path) -> Any:
    """The memory plan of a spec document, or None when it cannot be planned (a model
    config it cannot resolve, no geometry: validating the result says why)."""
    from fsdpspec.catalog.config_source import ModelConfigError
    from fsdpspec.job.job import resolve
    from fsdpspec.plan.planner import plan_job

    try:
        job = resolve(JobSpec.model_validate(plain), base_dir)
    except (ValueError, ModelConfigError):
        return None
    return plan_job(job) if job.geometry is not None else None


# The shortest sequence an import assumes where the source says none.
MIN_ASSUMED_SEQ_LEN = 128


def _fitting_sequences(plain: dict[str, Any], draft: Draft, base_dir: Path, plan: Any) -> Any:
    """A source that says no sequence length leaves the spec's default, our guess: one
    that does not fit the GPUs is halved, down to MIN_ASSUMED_SEQ_LEN, until the job
    fits them (the plan at that length); the default stays when none does."""
    default = Data().seq_len
    length = default // 2
    while length >= MIN_ASSUMED_SEQ_LEN:
        plain.setdefault("data", {})["seq_len"] = length
        shorter = _planned(plain, base_dir)
        if shorter is not None and shorter.fits_device:
            draft.put("data.seq_len", length, (
                f"assumed (the source does not say): the spec's default {default} does not "
                f"fit the GPUs; the longest power of two that does"))
            return shorter
        length //= 2
    return plan


def _fit_assumptions(document: CommentedMap, draft: Draft, base_dir: Path
                     ) -> tuple[list[Note], frozenset[str]]:
    """Plan the imported job: the notes to print, and the memory rules whose refusal the
    import accepts. What the source does not say is our guess, so a guess that does not
    fit is changed: an assumed sequence length is shortened, and the host RAM raised to
    its planned peak (FS203 would otherwise blame the user's config for our assumption).
    A job that still does not fit its GPUs is written only when the model or the GPU
    count is the import's own guess and some number of GPUs holds it: the note names the
    guess and what to set. Otherwise `refuse_validated` stops the import, and this note,
    said beside the rule's line, names the flag to pass."""
    from fsdpspec.plan.memory import GIB

    plain = _plain(document)
    plan = _planned(plain, base_dir)
    if plan is None:
        return [], frozenset()
    if not plan.fits_device and "data.seq_len" not in draft.fields:
        plan = _fitting_sequences(plain, draft, base_dir, plan)
    spec = plan.spec
    if not plan.fits_host and spec.resources.accelerator != "cpu":
        needed = math.ceil(plan.host.peak / GIB / 64) * 64
        draft.put("resources.host_memory_gib", needed,
                  f"assumed: the planned peak ({HOST_GIB_PER_GPU} GiB per GPU is too little)"
                  ": set your nodes' RAM")
    if plan.fits_device:
        return [], frozenset()
    model = spec.model.preset or spec.model.hf_config
    field = "model.preset" if spec.model.preset else "model.hf_config"
    model_guessed = _guessed(draft, field)
    count_guessed = any(_guessed(draft, f) for f in ("resources.nodes",
                                                      "resources.gpus_per_node"))
    fewest = plan.min_gpus
    if model_guessed:
        change = "which the file does not name: name your model with --preset or --hf-config"
    elif count_guessed and fewest is not None:
        change = (f"a GPU count the file does not say: it fits on {fewest}; set "
                  "resources.nodes (or pass --gpus-per-node)")
    else:
        change = "on the assumed GPU: give --accelerator for yours"
    note = Note(None, f"the model {model} does not fit {spec.world_size} × "
                f"{plan.accelerator.name} as configured (peak {plan.device.total / GIB:.1f} "
                f"of {plan.capacity / GIB:.1f} GiB), {change}; see `fsdpspec plan`")
    accepted = MEMORY_RULES if (model_guessed or count_guessed) and fewest is not None \
        else frozenset()
    return [note], accepted


def _supported_attention(draft: Draft, config: dict[str, Any] | None) -> None:
    """A source that names no attention lets transformers pick one its model supports
    (eager for a family without sdpa); the spec names it, so such a family gets eager
    rather than an sdpa default that `validate` refuses (FS410)."""
    found = family((config or {}).get("model_type"))
    if found is not None and found.eager_only and "model.attention" not in draft.fields:
        draft.put("model.attention", "eager",
                  f"not in the source: {found.model_type} runs eager attention only")


def finish(draft: Draft, *, tool: str, kind: str, source: str, name: str,
           model: Entry | None, layers: Entry | None, assumed: Assumptions,
           base_dir: Path,
           with_model: Callable[[Draft, dict[str, Any] | None], None] | None = None,
           ) -> Imported:
    """The commented v1 spec of a draft, or ImportRefused when the source asks for a
    feature the spec lacks. ``model`` is the model the source names, ``layers`` the
    wrapping classes it names (both checked here); ``with_model`` writes the fields
    that depend on the model's config, once it is known."""
    if draft.refusals:
        raise ImportRefused(sorted(draft.refusals, key=note_order))
    draft.put("metadata.name", name, "")
    _resources(draft, tool, assumed)
    _original_params(draft)
    _batch(draft)
    config = apply_model(draft, model, layers, assumed, base_dir)
    apply_layers(draft, layers, config)
    if with_model is not None:
        with_model(draft, config)
        if draft.refusals:
            raise ImportRefused(sorted(draft.refusals, key=note_order))
    _supported_attention(draft, config)
    _valid(draft, _document(draft, tool, kind, source))  # planning reads what it holds
    fit, accepted = _fit_assumptions(_document(draft, tool, kind, source), draft, base_dir)
    document = _document(draft, tool, kind, source)
    _valid(draft, document)  # the planned host memory is the spec's too
    text = dump_yaml(document)
    check_written(text, _plain(document), draft)
    refuse_validated(text, draft, base_dir, accepted=accepted, said=fit)
    notes = draft.notes + fit
    return Imported(text, sorted(notes, key=note_order),
                    {dotted: value for dotted, (value, _) in draft.fields.items()})


def _valid(draft: Draft, document: CommentedMap) -> None:
    refuse_unwritable(draft, _plain(document))
    refuse_invalid(draft, _plain(document))
