"""Context parallelism's ring attention on one rank: the key/value exchange buffers it
holds and the bytes it moves, as torch's `context_parallel` runs SDPA (torch 2.13,
``torch/distributed/tensor/experimental/_context_parallel/_attention.py``).

Each of the ``cp`` ranks holds ``T = micro × seq ÷ cp`` tokens (two load-balanced chunks)
of every sequence. Forward, in each layer, it concatenates its keys and values
(``2·b·T·kv``) and all-gathers them from the ring (torch's default rotate method,
``allgather``: ``cp`` such blocks at once), and merges the partial outputs into fp32
(output ``4·T·q`` and log-sum-exp). Backward gathers the keys and values again, keeps
fp32 gradients of q, k and v (``4·T·(q + 2kv)``) and passes the k/v gradients round the
ring with all-to-all (an fp32 block sent and one received). The activations themselves
are the local tokens' (`fsdpspec.job.batch.Batch.local_seq`).
"""

from __future__ import annotations

from fsdpspec.job.job import Job

MERGE_BYTES = 4  # torch upcasts the merged output and every k/v gradient (convert_to_f32)


def _kv_block(job: Job) -> int:
    """One rank's keys and values of one layer, concatenated."""
    return 2 * job.compute_bytes * job.batch.tokens * job.geometry.kv_width


def ring_forward_bytes(job: Job) -> int:
    """Live in one layer's ring attention forward: the local k/v block, the gathered
    blocks of the whole ring, and the fp32 merged output and log-sum-exp."""
    cp = job.layout.dims.cp
    if cp == 1:
        return 0
    g, t = job.geometry, job.batch.tokens
    merged = MERGE_BYTES * t * (g.q_width + g.num_heads)
    return (1 + cp) * _kv_block(job) + merged


def ring_backward_bytes(job: Job) -> int:
    """Live in one layer's ring attention backward: the gathered k/v of the ring, the
    fp32 gradients of q, k and v, and the k/v gradient block sent and the one received."""
    cp = job.layout.dims.cp
    if cp == 1:
        return 0
    g, t = job.geometry, job.batch.tokens
    grads = MERGE_BYTES * t * (g.q_width + 2 * g.kv_width)
    in_flight = 2 * MERGE_BYTES * t * 2 * g.kv_width
    return (1 + cp) * _kv_block(job) + grads + in_flight


def ring_traffic_bytes(job: Job) -> tuple[int, int]:
    """(forward, backward) bytes one rank receives per layer and micro-batch: the other
    ranks' k/v blocks, gathered once in forward and again in backward, and in backward
    the fp32 k/v gradients passed on at each of the ring's cp - 1 steps."""
    cp = job.layout.dims.cp
    gathered = (cp - 1) * _kv_block(job)
    gradients = (cp - 1) * MERGE_BYTES * 2 * job.batch.tokens * job.geometry.kv_width
    return gathered, gathered + gradients


# HBM bytes per element of torch's ring, per step past the first, on the ring's last rank
# (every step there merges, and accumulates, over its whole local block; the ranks wait
# for it at the next layer's ring): forward, `_SDPAMerger` upcasts the block's output to
# fp32 (2 + 4) and merges it in three fp32 kernels (out - block, sigmoid(lse) · that,
# out - that: 12 + 8 + 12) per output element; backward, `grad_query += ...` in fp32
# (4 + 2 + 4) per query element and, per key/value element, the partial update of dk and
# dv (a chunk added, 5, then `torch.cat`, 8: 26 for both), their fp32 concatenation for
# the send (16) and the bf16 k/v concatenation of the next rotation (8).
MERGE_FORWARD_BYTES = 38
ACCUMULATE_QUERY_BYTES = 10
ACCUMULATE_KV_BYTES = 50


def ring_serial_bytes(job: Job) -> tuple[int, int]:
    """(forward, backward) HBM bytes one layer's ring attention moves on the compute
    stream per micro-batch besides the attention kernels: the merge of each step's partial
    output and the accumulation of each step's gradients, in fp32, outside the kernels
    (elementwise work a single SDPA call does not have)."""
    cp = job.layout.dims.cp
    g, t = job.geometry, job.batch.tokens
    forward = (cp - 1) * MERGE_FORWARD_BYTES * t * g.q_width
    backward = (cp - 1) * (ACCUMULATE_QUERY_BYTES * t * g.q_width
                           + ACCUMULATE_KV_BYTES * t * g.kv_width)
    return forward, backward
