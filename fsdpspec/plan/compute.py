"""FLOPs and communication of one optimizer step, and the ideal times they take.

FLOPs follow the PaLM accounting (Chowdhery et al. 2022, appendix B): 6·N per token for
the matrix multiplies plus 12·L·q·S for attention scores and values; full activation
checkpointing re-runs the forward (a third more). Communication is what FSDP moves per
rank: an all-gather of each unit in forward and again in backward for units freed after
forward, a reduce-scatter of the gradients once per synchronised micro-batch (every one
but under NO_SHARD, where the engine reduces the last only), and for
replicated strategies an all-reduce across replicas; ring collectives move (n-1)/n of
the buffer per rank, an all-reduce twice that.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.plan.levers import chunked_loss_flops, offload_seconds
from fsdpspec.plan.memory import model_sharding, saved_activation_bytes
from fsdpspec.plan.workload import Workload
from fsdpspec.semantics import (
    model_flops_per_token,
    recompute_flops_per_token,
    synced_micro_batches,
)


@dataclass(frozen=True)
class Compute:
    """One step of one rank: work, traffic and the ideal time of each."""

    flops: float
    all_gather_bytes: int
    reduce_scatter_bytes: int
    all_reduce_bytes: int
    # None when the device's peak is unknown (a custom accelerator without *_tflops).
    compute_seconds: float | None
    communication_seconds: float
    # Activation offload's PCIe transfers (out in forward, back in backward).
    offload_seconds: float = 0.0

    @property
    def communication_bound(self) -> bool:
        """FSDP overlaps collectives with compute; when they take longer, they set the pace."""
        return self.compute_seconds is not None and \
            self.communication_seconds > self.compute_seconds


def step_flops(w: Workload, parameters: int) -> float:
    """FLOPs of one rank's optimizer step (all its micro-batches)."""
    shape = dict(parameters=parameters, num_layers=w.geometry.num_layers,
                 q_width=w.geometry.q_width, seq_len=w.seq_len)
    per_token = model_flops_per_token(**shape) + recompute_flops_per_token(
        **shape, mode=w.activation_checkpointing, ac_every=w.ac_every)
    return float(per_token * w.tokens * w.accumulation_steps) + chunked_loss_flops(w)


def step_compute(w: Workload, parameters: int, device: Accelerator, compute_dtype: str) -> Compute:
    """Work and traffic of one step, timed at the device's peaks."""
    sh = model_sharding(w)
    s, b, r = w.shard_size, w.compute_bytes, w.reduce_bytes
    ring = (s - 1) / s
    units = sum(sh.gathered_numel(u) * u.count for u in sh.units)
    root = sh.gathered_numel(sh.root)
    regathered = 0 if w.keeps_params_gathered else units
    micro = w.accumulation_steps
    synced = synced_micro_batches(w.strategy, micro)
    all_gather = int(b * ring * (units + root + regathered) * micro)
    reduce_scatter = int(r * ring * (units + root) * synced)
    replicas = w.world_size // s
    all_reduce = (int(2 * r * (units + root) / s * (replicas - 1) / replicas * synced)
                  if replicas > 1 else 0)
    flops = step_flops(w, parameters)
    peak = device.peak_tflops(compute_dtype)
    intra = all_gather + reduce_scatter if s <= w.gpus_per_node else 0
    inter = all_reduce + (0 if intra else all_gather + reduce_scatter)
    seconds = intra / (device.intra_node_gbps * 1e9) + inter / (device.inter_node_gbps * 1e9)
    return Compute(flops, all_gather, reduce_scatter, all_reduce,
                   flops / (peak * 1e12) if peak else None, seconds,
                   offload_seconds(saved_activation_bytes(w), w))
