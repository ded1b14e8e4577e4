"""Context parallelism on GPUs: each micro-batch's forward and backward run inside torch's
`context_parallel` (``torch.distributed.tensor.experimental``), which splits the
sequence over the ``cp`` sub-mesh with its head-tail load balancer (two chunks a rank,
so that causal attention costs every rank the same) and replaces SDPA with ring
attention for both passes, as torchtitan's ``train_context`` does.

The split happens before the model sees the batch, so what depends on a token's place in
the whole sequence is built first and split with it: the next-token labels and the
positions (rotary embeddings). The model is given an all-ones attention mask: with
positions but no mask (and no KV cache: a config with ``use_cache: false``),
transformers reads the balancer's jump between a rank's two chunks as a packed-sequence
boundary and builds a mask, which ring attention does not take; an all-ones mask lets
it pass ``is_causal`` instead (tests/engine/test_context_split.py). GPU-only: the CPU SDPA kernel
has no ring (FS190 refuses it at `validate`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.attention import SDPBackend, sdpa_kernel

from fsdpspec_runners.engine.loss import SHIFTED_LABELS, next_token_labels

# The SDPA kernels torch's ring attention shards (the math kernel has no ring).
RING_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                SDPBackend.CUDNN_ATTENTION]


@contextmanager
def sequence_split(mesh: DeviceMesh, batch: dict[str, torch.Tensor]
                   ) -> Iterator[dict[str, torch.Tensor]]:
    """Within the context, this rank's share of ``batch`` (on the device): ids, labels
    already shifted, whole-sequence positions, and the all-ones mask; SDPA is ring
    attention over ``mesh`` for the forward and the backward run inside it."""
    from torch.distributed.tensor.experimental import context_parallel

    ids = batch["input_ids"]
    labels = next_token_labels(batch)
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids).contiguous()
    buffers = [ids.clone(), labels, positions]
    with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[1, 1, 1],
                          no_restore_buffers=set(buffers)), sdpa_kernel(RING_KERNELS):
        local_ids, local_labels, local_positions = buffers
        yield {"input_ids": local_ids, SHIFTED_LABELS: local_labels,
               "position_ids": local_positions,
               "attention_mask": torch.ones_like(local_ids)}
