"""Device memory of one rank, term by term, at the moments a training step peaks.

A step is walked as FSDP runs it and the live tensors are summed at each candidate
peak: a DPO reference's forward (`reference_parameters`, `_reference_point`), forward's
all-gather copy-outs, the cross entropy at the end of forward, the start
of backward (loss gradients), the backward of the last and first layers and their
gradient reductions, the embedding's backward, the root's gradient reduction at the end
of backward, and the optimizer step. The largest is the predicted
``torch.cuda.max_memory_allocated``; the caching allocator's fragmentation is added for
``max_memory_reserved``, and the CUDA context and NCCL buffers, which live outside the
allocator, are reported beside them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fsdpspec.job.geometry import Geometry
from fsdpspec.job.job import Job
from fsdpspec.job.units import Unit
from fsdpspec.plan import activations as act
from fsdpspec.plan import memory_levers
from fsdpspec.plan.expert_parallel import dispatch_bytes
from fsdpspec.plan.float8 import backward_cast_bytes, gathered_float8_saving
from fsdpspec.plan.lora import adapted_parts, reference_copy_bytes
from fsdpspec.plan.ring import ring_backward_bytes
from fsdpspec.plan.tensor_parallel import local_geometry, tp_degree
from fsdpspec.plan.unit_shards import Sharding, sharding
from fsdpspec.semantics import (
    MASTER_BYTES,
    syncs_gradients,
)

GIB = 1 << 30
# Outside the caching allocator: the CUDA context with cuBLAS/cuDNN handles, and NCCL's
# channel buffers once a communicator exists (typical nvidia-smi minus reserved).
CUDA_CONTEXT_BYTES = GIB // 2
NCCL_BYTES = GIB // 2
# Reserved beyond allocated: FSDP2 frees its buffers on the compute stream and wastes
# little; FSDP1 uses record_stream, so blocks stay reserved longer.
FRAGMENTATION = {1: 0.10, 2: 0.05}

TERMS = (
    "sharded_parameters", "reference_parameters", "optimizer_states", "sharded_gradients",
    "gradient_buckets",
    "accumulated_gradients",
    "gathered_parameters", "prefetch_buffer", "unsharded_gradients", "reduce_scatter_buffers",
    "activations", "logits_and_loss", "backward_temporaries", "ring_buffers",
    "dispatch_buffers", "optimizer_temporaries",
)


@dataclass(frozen=True)
class Point:
    """The live tensors at one moment of a step."""

    name: str
    terms: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.terms.values())


@dataclass(frozen=True)
class DeviceMemory:
    """One rank's device memory: the peak moment, and what sits beside the allocator."""

    peak: Point
    points: tuple[Point, ...]
    fragmentation: int
    cuda_context: int
    nccl: int
    # Cached blocks the peak cannot use (reserved, but released by the allocator before
    # it would report out of memory): in max_memory_reserved, not in what must fit.
    idle_cache: int = 0

    @property
    def peak_allocated(self) -> int:
        return self.peak.total

    @property
    def peak_reserved(self) -> int:
        return self.peak_allocated + self.fragmentation + self.idle_cache

    @property
    def total(self) -> int:
        """What the device must hold: reserved (less the idle cache the allocator would
        release) plus context and NCCL."""
        return self.peak_reserved - self.idle_cache + self.cuda_context + self.nccl


@dataclass(frozen=True)
class _Parts:
    """Sizes the points draw on, computed once."""

    persistent: dict[str, int]
    accumulated: int
    root: int
    units_kept: int
    unit: int
    # The largest unit's all-gather copy-out temporaries (experts sharded on dim 1).
    unit_copy_out: int
    prefetch: int
    unit_grads: int
    head_grads: int
    # The output projection's gradient, held through the rest of backward (FSDP reduces
    # it with the root's at the end; DDP copies it into its bucket at once).
    head_held: int
    unit_reduce: int
    sharded_unit_grads: int
    sharded_layer_grads: int
    root_grads: int
    root_reduce: int
    saved: int
    layer: int
    sharded_grads: int
    optimizer_temporaries: int


def _local(job: Job) -> Geometry:
    """The model one rank holds: under tensor parallelism its local shards'."""
    assert job.geometry is not None  # the planner plans only jobs with a geometry
    return local_geometry(job.geometry, tp_degree(job))


def gathered_bytes(sh: Sharding, job: Job, unit: Unit) -> int:
    # FSDP2's unsharded parameters are views of each parameter's padded all-gather
    # output, FSDP1's of the padded flat parameter: the padding stays allocated (a
    # Mixture of Experts with fewer experts than ranks gathers one row per rank).
    # Weights FSDP2 gathers in float8 take one byte each.
    return (job.compute_bytes * sh.gathered_numel(unit)
            - gathered_float8_saving(job, unit, sh.shard_size))


def _units_kept_after_forward(job: Job, sh: Sharding) -> int:
    """Non-root parameters still gathered when forward ends: every unit under the
    strategies that do not reshard after forward; under FSDP2 the last unit (the engine
    keeps it, backward needs it at once); none under FSDP1."""
    if not job.layout.reshards_after_forward:
        return sum(gathered_bytes(sh, job, u) * u.count for u in sh.units)
    if job.layout.fsdp_version == 2 and sh.largest is not None:
        return gathered_bytes(sh, job, sh.largest)
    return 0


def _carried_gradients(job: Job, sh: Sharding, sharded: int) -> tuple[int, bool]:
    """Gradients carried from one micro-batch to the next, and whether they are
    unsharded. The engine reduces every micro-batch under the sharded strategies, so the
    sharded gradients accumulate in place; under NO_SHARD it skips the reduction until the
    last micro-batch, and FSDP keeps every unsharded gradient, upcast to the reduce dtype
    (FSDP2) or kept in the parameters' dtype (FSDP1)."""
    if job.batch.accumulation == 1:
        return 0, False
    if syncs_gradients(job.layout.strategy, last_micro_batch=False):
        return sharded, False
    per_param = job.reduce_bytes if job.layout.fsdp_version == 2 else MASTER_BYTES
    return per_param * (sh.layer_numel + sh.root.numel), True


def _ddp_parts(job: Job, sh: Sharding) -> _Parts:
    """DDP (`fsdpspec.job.layout.runs_as_ddp`, full precision): the parameters, their
    states and DDP's gradient buckets persist whole (the gradients are views of the
    buckets, which exist from the first forward on and accumulate in place); nothing is
    gathered or reduced into a buffer. In backward only the gradient autograd
    has just produced is alive beside the buckets, until DDP copies it in."""
    g, m = job.geometry, MASTER_BYTES
    params = m * sh.total_shard_numel()
    saved, layer = _device_activations(job)
    tensors = memory_levers.shard_tensors(sh)
    # Under accumulation, the second step's last micro-batch rebuilds the buckets (in the
    # order backward readied the gradients): the first micro-batch's gradients live on
    # in the old buckets until backward copies each into its new one, 4 · P more than at
    # any later step (measured: benchmarks/ddp_memory.py).
    rebuilt = params if job.batch.accumulation > 1 else 0
    return _Parts(
        persistent={"sharded_parameters": params, "gradient_buckets": params,
                    "optimizer_states": memory_levers.optimizer_state_bytes(job, tensors)},
        accumulated=rebuilt, root=0, units_kept=0, unit=0, unit_copy_out=0, prefetch=0,
        unit_grads=m * g.down_proj_numel, head_grads=m * g.embedding_params, head_held=0,
        unit_reduce=0, sharded_unit_grads=0, sharded_layer_grads=0,
        root_grads=m * g.embedding_params, root_reduce=0, saved=saved, layer=layer,
        sharded_grads=0,
        optimizer_temporaries=memory_levers.optimizer_step_temporaries(job, tensors),
    )


def _parts(job: Job, sh: Sharding) -> _Parts:
    if job.layout.ddp:
        return _ddp_parts(job, sh)
    g, b, r, m = _local(job), job.compute_bytes, job.reduce_bytes, MASTER_BYTES
    shard_bytes = m * sh.total_shard_numel()
    on_device = 0 if job.spec.fsdp.cpu_offload else 1
    unit = sh.largest
    unit_padded = sh.gathered_numel(unit) if unit else 0
    prefetch = 0
    if unit and job.layout.reshards_after_forward and job.spec.fsdp.backward_prefetch != "NONE":
        prefetch = b * unit_padded
    carried, unsharded_carry = _carried_gradients(job, sh, on_device * shard_bytes)
    grads = 0 if unsharded_carry else 1
    reduced = 0 if carried and not unsharded_carry else on_device
    saved, layer = _device_activations(job)
    tensors = memory_levers.shard_tensors(sh)
    parts = _Parts(
        persistent={"sharded_parameters": on_device * shard_bytes,
                    "optimizer_states":
                        on_device * memory_levers.optimizer_state_bytes(job, tensors)},
        accumulated=carried,
        # The root stays gathered from its forward to its backward: the engine keeps it
        # under FSDP2 (reshard_after_forward=False) and FSDP1 never frees it before backward.
        root=gathered_bytes(sh, job, sh.root),
        units_kept=_units_kept_after_forward(job, sh),
        unit=gathered_bytes(sh, job, unit) if unit else 0,
        unit_copy_out=b * sh.resharded_expert_numel(unit) if unit else 0,
        prefetch=prefetch,
        # Backward reaches a layer's MLP first: its down projection's gradient exists.
        unit_grads=grads * b * g.down_proj_numel,
        head_grads=grads * b * g.embedding_params,
        head_held=grads * b * g.embedding_params,
        unit_reduce=r * unit_padded,
        sharded_unit_grads=reduced * m * (sh.shard_numel(unit) if unit else 0),
        sharded_layer_grads=reduced * m * sum(sh.shard_numel(u) * u.count for u in sh.units),
        root_grads=grads * b * sh.root.numel,
        root_reduce=r * sh.gathered_numel(sh.root),
        saved=saved,
        layer=layer,
        sharded_grads=on_device * shard_bytes,
        optimizer_temporaries=on_device * memory_levers.optimizer_step_temporaries(job, tensors),
    )
    if job.adapters is not None:
        parts = adapted_parts(parts, job, sh,
                              lambda index, full: _saved_through(job, index, full))
    return _with_reference(job, sh, parts)


def reference_copy(job: Job) -> bool:
    """Whether DPO's reference is a frozen copy of the model (`train.dpo.reference:
    model`); `adapter` runs the policy with its adapters off and `precomputed` reads
    log-probs from the data, so neither holds a second model."""
    train = job.spec.train
    return train.objective == "dpo" and train.dpo.reference == "model"


def reference_forward(job: Job) -> bool:
    """Whether each micro-batch runs a reference forward (`model` or `adapter`)."""
    train = job.spec.train
    return train.objective == "dpo" and train.dpo.reference != "precomputed"


def _with_reference(job: Job, sh: Sharding, p: _Parts) -> _Parts:
    """A frozen reference copy is sharded as the policy is, without gradients or
    optimizer state: under FSDP2 stored in the compute dtype (the engine's
    `as_reference`), under FSDP1 as the policy's flat parameters. Its forward gathers
    each unit and frees it; the engine reshards what FSDP2 keeps after forward (the root,
    the last unit), while FSDP1 keeps its root gathered (and, without resharding after
    forward, its units) through the step."""
    if not reference_copy(job):
        return p
    if job.layout.fsdp_version == 1:
        reference = p.persistent["sharded_parameters"] + p.root + p.units_kept
    else:
        on_device = 0 if job.spec.fsdp.cpu_offload else 1
        reference = on_device * (reference_copy_bytes(job, sh) if job.adapters is not None
                                 else job.compute_bytes * sh.total_shard_numel())
    return dataclasses.replace(p, persistent=p.persistent | {"reference_parameters": reference})


def _layer_activations(job: Job) -> tuple[int, int]:
    """(bytes saved by all layers, bytes one layer saves without checkpointing)."""
    full = layer_bytes(job)
    return _saved_through(job, job.geometry.num_layers - 1, full), full


def _device_activations(job: Job) -> tuple[int, int]:
    """`_layer_activations` as the device holds them: with activation offload the saved
    bytes are in host memory until backward brings each layer's back."""
    saved, layer = _layer_activations(job)
    return (0 if job.spec.fsdp.activation_offload else saved), layer


def saved_activation_bytes(job: Job) -> int:
    """Bytes every layer saves for backward (what activation offload moves to the host)."""
    return _layer_activations(job)[0]


def layer_bytes(job: Job) -> int:
    """Activation bytes one layer saves for backward without checkpointing (the memory
    walk's, and the step-time model's elementwise traffic)."""
    return act.layer_activation_bytes(job.geometry, job.compute_bytes, job.batch.sequences,
                                      job.batch.local_seq, job.attention, tp=tp_degree(job))


def _saved_through(job: Job, index: int, full: int) -> int:
    """Bytes layers 0..index hold for backward (a checkpointed layer: its input; under
    op-level checkpointing also the outputs its policy saves)."""
    units, g, b = job.units, job.geometry, job.compute_bytes
    assert units is not None  # the planner plans only jobs with a geometry
    micro, seq, tp = job.batch.sequences, job.batch.local_seq, tp_degree(job)
    if units.ac_mode == "op":
        kept = memory_levers.op_checkpointed_layer_bytes(g, b, micro, seq, job.attention, tp=tp)
    else:
        kept = act.checkpointed_layer_bytes(g, b, micro, seq, tp=tp)
    checkpointed = units.checkpointed_count(index + 1)
    mask = act.checkpointed_mask_bytes(g, b, micro, seq, job.attention)
    return checkpointed * kept + (index + 1 - checkpointed) * full + (mask if checkpointed else 0)


def _deferred_gather(job: Job) -> bool:
    """Whether forward keeps each unit's all-gather output until the next unit's copy-out
    (FSDP2 over a shard group of more than one: it overlaps the copy-out with the next
    all-gather). The previous output is freed as the next unit's wait begins, but the
    local that held it lives through that copy-out, so two outputs coexist with the new
    unit's unsharded parameters; the root's forward frees the last one after lm_head."""
    return job.layout.fsdp_version == 2 and job.layout.shard_size > 1


def _reference_points(job: Job, p: _Parts) -> list[Point]:
    """A DPO reference's forward, before the policy's (no gradients, so nothing saved):
    at its loss, its root and the units it keeps gathered, the last unit's all-gather
    output, and both sequences' logits, upcast and log-softmax."""
    if not reference_forward(job):
        return []
    g, b = _local(job), job.compute_bytes
    last_gather = p.unit if _deferred_gather(job) else 0
    # (FSDP1's copy keeps them gathered: counted in its reference_parameters.)
    held = reference_copy(job) and job.layout.fsdp_version == 1
    return [Point("reference forward: loss", p.persistent | {
        "accumulated_gradients": p.accumulated,
        "gathered_parameters": 0 if held else p.root + p.units_kept,
        "prefetch_buffer": last_gather,
        "logits_and_loss": act.logits_forward_bytes(g, b, job.batch.sequences,
                                                    job.batch.local_seq),
    })]


def _forward_points(job: Job, p: _Parts) -> list[Point]:
    """Forward's all-gather copy-outs: the root's, the first unit's (the root's output
    still held) and the last unit's (most activations saved). They peak when the root is
    large beside the activations (fp32 compute with checkpointing: one root's gathered
    bytes more than any backward moment)."""
    if not _deferred_gather(job) or not p.unit:
        return []
    b, lay, layers = job.compute_bytes, job.layout, job.geometry.num_layers
    # The hidden states entering a layer (1/tp of the positions under sequence
    # parallelism) and the rotary cos/sin, alive from the embedding on.
    g = job.geometry
    entering = b * job.batch.tokens * (g.hidden_size // tp_degree(job) + 2 * g.head_dim)
    base = p.persistent | {"accumulated_gradients": p.accumulated}
    points = [Point("forward: root all-gather", base | {"gathered_parameters": 2 * p.root})]
    for index in sorted({0, layers - 1}):
        previous = p.root if index == 0 else p.unit  # the all-gather output still held
        kept = 0 if lay.reshards_after_forward else index * p.unit
        points.append(Point(f"forward: layer {index} all-gather", base | {
            "gathered_parameters": p.root + kept + p.unit,
            "prefetch_buffer": previous + p.unit + p.unit_copy_out,
            "activations": entering + (_saved_through(job, index - 1, p.layer) if index else 0),
        }))
    return points


def _head_points(job: Job, p: _Parts) -> list[Point]:
    """From the lm_head's forward to its backward: logits and loss, the root gathered
    throughout. Under tensor parallelism the logits stay split by vocabulary (loss
    parallel): the local geometry's vocabulary."""
    g, b = _local(job), job.compute_bytes
    batch, seq = job.batch.sequences, job.batch.local_seq
    logits = b * batch * seq * g.vocab_size
    acts = p.saved + act.root_activation_bytes(job.geometry, b, batch, seq, tp=tp_degree(job))
    base = p.persistent | {"accumulated_gradients": p.accumulated, "activations": acts,
                           "gathered_parameters": p.root + p.units_kept}
    # The last unit's all-gather output lives until the root's forward ends.
    last_gather = p.unit if _deferred_gather(job) else 0
    lm_head = base | {"logits_and_loss": logits + act.router_loss_bytes(g, b, batch, seq),
                      "prefetch_buffer": last_gather}
    split = tp_degree(job) > 1  # loss parallel
    loss_forward = base | {"logits_and_loss": act.logits_forward_bytes(
        g, b, batch, seq, loss_parallel=split)}
    loss_backward = base | {"logits_and_loss": act.logits_backward_bytes(
        g, b, batch, seq, loss_parallel=split)}
    # The lm_head's weight gradient is computed from the logits' gradient.
    head_backward = base | {"unsharded_gradients": p.head_grads, "logits_and_loss": logits}
    points = {"forward: lm_head": lm_head, "forward: loss": loss_forward,
              "backward: loss": loss_backward, "backward: lm_head": head_backward}
    if job.spec.train.loss_chunks > 1:
        # The lm_head's weight gradient exists from the first chunk's backward on.
        for name, terms in memory_levers.chunked_head_terms(job).items():
            grads = p.head_grads if name.startswith("backward") else 0
            points[name] = base | terms | {"unsharded_gradients": grads}
        # The head weight's chunk gradients are summed out of place, tied or not
        # (measured by the trace; pythia-1.4b and olmo2-7b were 2.7 % and 2.5 % under
        # while only a tied head's sum was counted): the running sum, the new chunk's
        # and their sum at once, beside the hidden states' gradients.
        points["backward: loss, head gradient sum"] = base | {
            "unsharded_gradients": 3 * p.head_grads,
            "logits_and_loss": b * job.batch.tokens * g.hidden_size}
    return [Point(name, terms) for name, terms in points.items()]


def _layer_point(job: Job, p: _Parts, index: int) -> Point:
    """Backward inside layer ``index``: the layers below it still hold their activations
    (a checkpointed layer recomputes its own), the layers above have been reduced to
    sharded gradients, the one just above is still in its reduce-scatter, and the one
    below is being prefetched."""
    g, b, layers = _local(job), job.compute_bytes, job.geometry.num_layers
    activations = _saved_through(job, index, p.layer)
    if job.spec.fsdp.activation_offload:
        # Only the layer in backward has its saved tensors back on the device.
        activations -= _saved_through(job, index - 1, p.layer) if index else 0
    if job.units.is_checkpointed(index):
        activations += p.layer
    lay = job.layout
    gathered = p.root + (p.unit if lay.reshards_after_forward else (index + 1) * p.unit)
    temporaries = act.backward_temporaries(g, b, job.batch.sequences, job.batch.local_seq,
                                           job.attention) + backward_cast_bytes(job)
    return Point(f"backward: layer {index}", {
        **p.persistent,
        "accumulated_gradients": p.accumulated,
        "gathered_parameters": gathered,
        "prefetch_buffer": p.prefetch if index > 0 else 0,
        "unsharded_gradients": p.head_held + p.unit_grads,
        "sharded_gradients": (layers - 1 - index) * p.sharded_unit_grads,
        "reduce_scatter_buffers": p.unit_reduce if index < layers - 1 else 0,
        "activations": activations,
        "backward_temporaries": temporaries,
        # Context parallelism: the ring attention's k/v exchange (fsdpspec/plan/ring.py).
        "ring_buffers": ring_backward_bytes(job),
        # Expert parallelism: an all-to-all's send and receive buffers (balanced routing).
        "dispatch_buffers": dispatch_bytes(job),
    })


def _experts_point(job: Job, p: _Parts, index: int) -> Point:
    """Later in a Mixture-of-Experts layer's backward, at its gate_up weight gradient:
    every expert's gradients exist at once (the grouped matmul computes whole expert
    tensors), while the layer's expert activations are freed but for the rows gathered
    for the experts."""
    g, b, t = job.geometry, job.compute_bytes, job.batch.tokens
    e = g.experts
    assert e is not None
    rows = t * e.active
    point = _layer_point(job, p, index)
    freed = act.mlp_activation_bytes(g, b, t) - b * rows * g.hidden_size
    # A LoRA's experts are frozen (adapters never go on the stacked expert tensors).
    # Under expert parallelism the rank's own experts only; the routed rows it receives
    # are, balanced, as many as it sent.
    trained = p.unit_grads and job.adapters is None
    grads = (1 if trained else 0) * b * g.experts_numel // job.layout.dims.ep
    return Point(f"backward: layer {index} experts", point.terms | {
        "activations": point.terms["activations"] - freed,
        "unsharded_gradients": p.head_held + grads,
        "backward_temporaries": b * rows * (2 * e.width + g.hidden_size),
    })


def _reduction_point(job: Job, p: _Parts, index: int) -> Point:
    """The end of layer ``index``'s backward, as its post-backward hook allocates the
    reduce-scatter input: the unit already resharded, its activations freed, its whole
    gradient (compute dtype) and the fp32 input alive at once; the unit below prefetched
    (or, without resharding, every unit below still gathered)."""
    lay, layers = job.layout, job.geometry.num_layers
    below = _saved_through(job, index - 1, p.layer) if index else 0
    unit_grads = p.unit_reduce * job.compute_bytes // job.reduce_bytes if p.unit_grads else 0
    return Point(f"backward: layer {index} reduction", {
        **p.persistent,
        "accumulated_gradients": p.accumulated,
        "gathered_parameters": p.root + (0 if lay.reshards_after_forward else index * p.unit),
        "prefetch_buffer": p.prefetch if index > 0 else 0,
        "unsharded_gradients": p.head_held + unit_grads,
        "sharded_gradients": (layers - 1 - index) * p.sharded_unit_grads,
        "reduce_scatter_buffers": p.unit_reduce,
        "activations": 0 if job.spec.fsdp.activation_offload else below,
    })


def _layer_points(job: Job, p: _Parts) -> list[Point]:
    """The layers whose backward can peak: the last two (most activations alive) and the
    first two (most gradients reduced; with checkpointing, as many activations)."""
    last = job.geometry.num_layers - 1
    indices = sorted({i for i in (last, last - 1, 1, 0) if 0 <= i <= last}, reverse=True)
    points = [_layer_point(job, p, i) for i in indices]
    points += [_reduction_point(job, p, i) for i in indices]
    if job.geometry.experts:
        points += [_experts_point(job, p, i) for i in indices]
    return points


def _points(job: Job, p: _Parts) -> list[Point]:
    backward_end = p.persistent | {
        "accumulated_gradients": p.accumulated,
        "sharded_gradients": p.sharded_layer_grads,
        "unsharded_gradients": p.root_grads,
        "reduce_scatter_buffers": p.root_reduce,
    }
    # The embedding's backward, just before the root's reduction: the root still gathered,
    # the first unit's reduce-scatter input kept. A tied weight's two gradients are summed
    # out of place (autograd held lm_head's since backward began): both and their sum.
    tied = job.geometry.tie_word_embeddings
    grads = 3 * p.head_grads if tied else p.root_grads
    embedding = backward_end | {"gathered_parameters": p.root,
                                "unsharded_gradients": max(grads, p.root_grads,
                                                           _vocab_parallel_embedding(job, p)),
                                "reduce_scatter_buffers": p.unit_reduce}
    optimizer_step = p.persistent | {"sharded_gradients": p.sharded_grads,
                                     "optimizer_temporaries": p.optimizer_temporaries}
    layer_points = _layer_points(job, p) if p.unit or job.layout.ddp else []
    return [*_reference_points(job, p), *_forward_points(job, p), *_head_points(job, p),
            *layer_points,
            Point("backward: embedding", embedding),
            Point("backward: root gradient reduction", backward_end),
            Point("optimizer step", optimizer_step)]


def _vocab_parallel_embedding(job: Job, p: _Parts) -> int:
    """Gradients at a vocabulary-split embedding's backward (0 without TP): DTensor has
    no row-wise strategy for ``embedding_dense_backward``, so from the gradient split over
    the sequence it computes a partial gradient of the whole vocabulary (b · V · H), then
    reduce-scatters it to the rank's rows (its local gradient), beside the root's other
    gradients; a tied head's (held since backward began) is summed with those rows out
    of place while the partial lives. Read off the traces: Llama 3 8B at TP 8 held
    1,127 MiB of unsharded gradients there (the plan had 251), Gemma 7B (tied) one local
    gradient more."""
    if tp_degree(job) == 1:
        return 0
    g = job.geometry
    held = 2 * p.head_grads if g.tie_word_embeddings else 0
    return p.root_grads + held + job.compute_bytes * g.embedding_params


def _idle_logits_block(job: Job, peak: Point) -> int:
    """Reserved but idle at the loss's backward: the compute-dtype logits (b · T · V),
    freed when forward ends, cannot hold any of the fp32 gradients backward then
    allocates (each twice its size; the caching allocator neither merges nor spans
    segments), so their block stays cached beside the new ones until the logits'
    own gradient reuses it. Not under a chunked loss (one chunk's logits), nor in fp32."""
    if (peak.name != "backward: loss" or job.spec.train.loss_chunks > 1
            or job.compute_bytes >= MASTER_BYTES or tp_degree(job) > 1):
        return 0  # (loss parallel keeps its logits to the end of the loss's backward)
    return job.compute_bytes * job.batch.tokens * _local(job).vocab_size


def device_memory(job: Job, *, is_gpu: bool = True) -> DeviceMemory:
    """One rank's device memory for the workload."""
    points = tuple(Point(pt.name, {t: pt.terms.get(t, 0) for t in TERMS})
                   for pt in _points(job, _parts(job, sharding(job))))
    peak = max(points, key=lambda pt: pt.total)
    return DeviceMemory(
        peak=peak,
        points=points,
        fragmentation=int(FRAGMENTATION[job.layout.fsdp_version] * peak.total),
        cuda_context=CUDA_CONTEXT_BYTES if is_gpu else 0,
        nccl=NCCL_BYTES if is_gpu and job.layout.world_size > 1 else 0,
        idle_cache=_idle_logits_block(job, peak) if is_gpu else 0,
    )
