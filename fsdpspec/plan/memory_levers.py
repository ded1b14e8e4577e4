"""The memory levers beyond sharding and per-layer checkpointing, as the memory model
counts them: the chunked loss (`train.loss_chunks`), op-level selective checkpointing
(`fsdp.activation_checkpointing: op`), activation offload (`fsdp.activation_offload`) and
the optimizer's state precision (`optimizer.state_dtype`). Each function is the term its
lever changes; `memory.py` calls them at the moments they apply to.
"""

from __future__ import annotations

import math
import re

from fsdpspec.job.geometry import Geometry
from fsdpspec.job.job import Job
from fsdpspec.plan import activations as act
from fsdpspec.plan.tensor_parallel import local_geometry
from fsdpspec.plan.unit_shards import Sharding
from fsdpspec.semantics import MASTER_BYTES
from fsdpspec.spec.v1 import JobSpec

# Host-to-device bandwidth one GPU sees over PCIe Gen5 x16, per direction (GB/s), as
# pinned-memory copies reach it in practice.
PCIE_GBPS = 50.0
# torchao's AdamW8bit quantises each state in blocks of 256 with one fp32 scale per
# block; tensors under 4096 elements keep fp32 states.
INT8_BLOCK = 256
INT8_MIN_NUMEL = 4096


def loss_chunks_apply(spec: JobSpec) -> bool:
    """The chunked loss takes over a transformers model's output projection, under FSDP2,
    when peft leaves it a plain Linear (lint rule FS231), in the supervised loss (DPO's is
    not chunked: FS563)."""
    return (not spec.model.factory and spec.fsdp.version == 2 and not peft_wraps_head(spec)
            and spec.train.objective == "sft")


def peft_wraps_head(spec: JobSpec) -> bool:
    """peft replaces lm_head (an adapter on it, or a trained copy): the chunked loss,
    which applies the head's own weight chunk by chunk, would skip what peft adds."""
    if spec.peft is None:
        return False
    targets = spec.peft.target_modules
    if isinstance(targets, str):  # a regular expression peft full-matches
        return bool(re.fullmatch(targets, "lm_head")) or any(
            n == "lm_head" or n.endswith(".lm_head") for n in spec.peft.modules_to_save)
    names = [*targets, *spec.peft.modules_to_save]
    return any(n == "lm_head" or n.endswith(".lm_head") for n in names)


def int8_states_apply(spec: JobSpec) -> bool:
    """torchao's 8-bit states are checkpointed under FSDP2's sharded state dict only
    (lint rule FS551)."""
    return spec.fsdp.version == 2 and spec.fsdp.state_dict_type == "SHARDED_STATE_DICT"


def chunked_loss_flops(job: Job) -> float:
    """FLOPs the chunked loss adds per step: each chunk's projection runs again in
    backward (2 · H · V per token)."""
    if job.spec.train.loss_chunks == 1:
        return 0.0
    g = job.geometry
    return 2.0 * g.hidden_size * g.vocab_size * job.batch.tokens * job.batch.accumulation


def chunk_tokens(job: Job) -> int:
    """Tokens of one loss chunk: ``torch.chunk`` over the micro-batch's tokens."""
    return math.ceil(job.batch.tokens / job.spec.train.loss_chunks)


def chunked_head_terms(job: Job) -> dict[str, dict[str, int]]:
    """``logits_and_loss`` (and the lm_head's weight gradient) at the head's moments
    under a chunked loss. The model's forward ends at the final norm; each chunk's
    projection and cross entropy run under checkpointing: in forward one chunk's logits,
    their upcast and log-softmax; in backward the same chunk recomputed, the gradients
    into and out of its log-softmax, the recomputed logits and their gradient, and the
    hidden-state gradients of the chunks already done (b · T · H, kept until the last
    chunk's arrives)."""
    g, b, tokens = job.geometry, job.compute_bytes, chunk_tokens(job)
    forward = act.logits_forward_bytes(g, b, 1, tokens)
    hidden_grads = b * job.batch.tokens * g.hidden_size
    backward = act.logits_backward_bytes(g, b, 1, tokens)
    if not g.tie_word_embeddings:
        # Read off the trace: an untied head's chunk also holds its recomputed logits and
        # their gradient here; a tied one has freed them (its peak is the gradient sum).
        backward += 2 * b * tokens * g.vocab_size
    return {
        "forward: lm_head": {"logits_and_loss": act.router_loss_bytes(
            g, b, job.batch.sequences, job.batch.local_seq)},
        "forward: loss": {"logits_and_loss": forward},
        "backward: loss": {"logits_and_loss": backward + hidden_grads},
        "backward: lm_head": {"logits_and_loss": hidden_grads},
    }


def _matmul_widths(g: Geometry) -> list[int]:
    """Output widths of a layer's projections that run as ``aten.mm``, in forward order:
    the weight matrices without a bias (a bias makes it ``addmm``); stacked expert
    weights run as grouped matmuls, not ``mm``."""
    names = {name for name, _ in g.layer_tensors()}
    return [shape[0] for name, shape in g.layer_tensors()
            if name.endswith(".weight") and len(shape) == 2
            and name.removesuffix(".weight") + ".bias" not in names]


def op_checkpointed_layer_bytes(g: Geometry, b: int, batch: int, seq: int,
                                attention: str, *, tp: int = 1) -> int:
    """What one layer keeps under torchtitan's op-level policy: its input, the outputs
    of the first, third, … ``mm`` (every other one is recomputed), and the fused
    attention's output and log-sum-exp (eager attention's matmuls are ``bmm``: kept by
    nothing); under tensor parallelism, of the rank's local projections."""
    t, local = batch * seq, local_geometry(g, tp)
    kept = sum(width for i, width in enumerate(_matmul_widths(local)) if i % 2 == 0)
    total = act.checkpointed_layer_bytes(g, b, batch, seq, tp=tp) + b * t * kept
    if attention != "eager":
        total += b * t * local.q_width + 4 * batch * local.num_heads * seq
    return total


def offloaded_activation_bytes(saved: int, job: Job) -> int:
    """Host memory one rank's offloaded activations take (pinned, as saved)."""
    return saved if job.spec.fsdp.activation_offload else 0


def offload_seconds(saved: int, job: Job) -> float:
    """PCIe time of one step's offload: every saved byte to the host in forward and back
    in backward, per micro-batch (overlapped with compute in forward)."""
    if not job.spec.fsdp.activation_offload:
        return 0.0
    return 2 * saved * job.batch.accumulation / (PCIE_GBPS * 1e9)


def shard_tensors(sh: Sharding) -> list[tuple[int, int]]:
    """(elements, how many) of each sharded tensor one rank holds: FSDP2 shards each
    parameter (`Sharding.tensor_shards`), FSDP1 each unit as one flat parameter."""
    if sh.fsdp_version == 1:
        return [(sh.shard_numel(u), u.count) for u in sh.all_units]
    return [(k, n * u.count) for u in sh.all_units for k, n in sh.tensor_shards(u)]


def optimizer_state_bytes(job: Job, tensors: list[tuple[int, int]]) -> int:
    """The optimizer's state of one rank's shards, in ``optimizer.state_dtype``."""
    if job.optimizer_state_dtype == "bfloat16":
        per_state = sum(2 * n * k for n, k in tensors)
    elif job.optimizer_state_dtype == "int8":
        per_state = sum((n + MASTER_BYTES * math.ceil(n / INT8_BLOCK) if n >= INT8_MIN_NUMEL
                         else MASTER_BYTES * n) * k for n, k in tensors)
    else:
        per_state = sum(MASTER_BYTES * n * k for n, k in tensors)
    return job.optimizer_states * per_state


def optimizer_step_temporaries(job: Job, tensors: list[tuple[int, int]]) -> int:
    """The optimizer step's temporaries: torch's foreach AdamW one fp32 buffer for every
    shard; the bf16-state AdamW steps one tensor at a time, reading both moments into
    fp32 and dividing (three fp32 copies of the largest shard); torchao's compiled 8-bit
    step fuses them away."""
    if job.optimizer_states != 2 or not tensors:
        return 0
    if job.optimizer_state_dtype == "bfloat16":
        return 3 * MASTER_BYTES * max(n for n, _ in tensors)
    if job.optimizer_state_dtype == "int8":
        return 0
    return sum(MASTER_BYTES * n * k for n, k in tensors)
