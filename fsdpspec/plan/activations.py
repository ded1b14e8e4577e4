"""Activation memory of one rank: what autograd saves per layer, the logits and the loss.

Counts are the tensors the transformers implementations of the supported families save
for backward (read off ``torch.autograd.graph.saved_tensors_hooks`` on each family, and
checked against the fake-tensor trace). ``b`` is the compute dtype's size, T the tokens
of one micro-batch, H/I the hidden/MLP widths, q/kv the query/key-value widths:

- RMSNorm feeding a projection: the fp32 upcast input (4TH), the normalised value cast
  back (bTH) and the output the projection saves (bTH); a norm that applies its weight
  in fp32 (Gemma, OLMo 2, gpt-oss) saves 8TH and the output (bTH).
- Attention, SDPA / flash: rotated q and k, v (bT(q + 2kv)), the output (bTq) and the
  log-sum-exp (4·B·heads·S); from the sliding window on, an explicit mask (b·B·S²) and
  keys and values repeated to every head. Eager: q, k and v
  expanded to every head (3bTq; without grouped-query attention Phi-3's v is a view of
  the fused qkv output, bT(q + 2kv)), the output copy (bTq), and the attention
  probabilities: fp32 softmax plus its cast (B·heads·S²·(4+b)).
- MLP (gated): gate, activation, up and their product (4bTI); not gated (GPT-NeoX,
  StarCoder2): the up projection and its activation (2bTI).
- Dropout on the hidden states (StarCoder2's residual and embedding dropout, GPT-NeoX's
  hidden_dropout, Phi-3's resid_pdrop) at a rate above 0: a bool mask each (TH), two a
  layer and one on the embeddings.
- LayerNorm (GPT-NeoX, StarCoder2, PhiMoE) computes in the compute dtype: its input and
  its output (2bTH); with a parallel residual both norms read one saved input.
- Mixture of Experts, S = T·k routed rows of width W: the rows gathered per expert and
  the expert output (2bSH), the expert-width tensors of the gated MLP (4bSW; gpt-oss 7),
  the fp32 router probabilities (4TE) and the routing indices and weights (~40 bytes per
  row). The load-balancing loss keeps every layer's fp32 router probabilities (4LTE) and
  briefly a one-hot of the choices (int64 and fp32, 12·L·S·E).
"""

from __future__ import annotations

from fsdpspec.job.geometry import Geometry
from fsdpspec.plan.tensor_parallel import local_geometry


def norm_bytes(g: Geometry, b: int, width_tokens: int, *, tp: int = 1) -> int:
    """A norm whose output feeds a projection (so the output is saved too). Under
    sequence parallelism the norm runs on 1/tp of the positions and its output is
    all-gathered for the projection, which saves it whole."""
    if g.norm_bias:
        own = b * width_tokens
    elif g.fp32_norm:
        own = 8 * width_tokens
    else:
        own = (4 + b) * width_tokens
    return own // tp + b * width_tokens


def _attention_bytes(g: Geometry, b: int, batch: int, seq: int, attention: str) -> int:
    t = batch * seq
    q, kv = g.q_width, g.kv_width
    if attention == "eager" and g.attention_sinks:
        # gpt-oss appends a sink column and takes the softmax in the compute dtype.
        return 4 * b * t * q + b * batch * g.num_heads * seq * (seq + 1)
    if attention == "eager":
        probs = (4 + (b if b < 4 else 0)) * batch * g.num_heads * seq * seq
        if g.attn_softcap:
            probs += b * batch * g.num_heads * seq * seq  # the tanh output
        # v expanded to every head is a copy; without grouped-query attention nothing is
        # expanded, and Phi-3's v is then saved as a view that keeps the fused qkv alive.
        v_bytes = b * t * (q + 2 * kv) if g.fused_qkv and kv == q else b * t * q
        return 3 * b * t * q + v_bytes + probs
    # A fused qkv's v (Phi-3, GPT-NeoX) is a view of its output, so the whole output stays alive.
    v_bytes = b * t * (q + 2 * kv) if g.fused_qkv else b * t * kv
    lse = 4 * batch * g.num_heads * seq
    total = b * t * (q + kv) + v_bytes + b * t * q + lse
    if g.head_major_query:
        total += b * t * q
    if window_masked(g, seq, attention):
        # Past the window transformers passes SDPA an explicit mask (per layer, in the
        # compute dtype), and with a mask it repeats keys and values to every head; only
        # the sliding layers do (spread evenly over the layers).
        window = b * batch * seq * seq + 2 * b * t * (q - kv)
        total += window * g.sliding_layers // g.num_layers
    return total


def window_masked(g: Geometry, seq: int, attention: str) -> bool:
    """Whether SDPA gets an explicit mask: from the sliding window on (before it, and in
    a global layer, transformers passes `is_causal` and no mask)."""
    return attention == "sdpa" and bool(g.sliding_window) and seq >= g.sliding_window


def checkpointed_mask_bytes(g: Geometry, b: int, batch: int, seq: int,
                            attention: str) -> int:
    """The masks transformers builds once per forward and passes to every layer. A
    checkpointed layer keeps its inputs for the recomputation, the masks among them,
    until backward; without checkpointing each layer saves what it derives from them
    instead (`_attention_bytes`). SDPA gets one only past the sliding window (a bool per
    pair of positions); eager one in the compute dtype for each kind of layer (global
    and sliding: Gemma 2, Gemma 3 and gpt-oss mix them)."""
    pairs = batch * seq * seq
    if attention == "eager":
        mixed = g.sliding_window and 0 < g.sliding_layers < g.num_layers
        return (2 if mixed else 1) * b * pairs
    return pairs if window_masked(g, seq, attention) and g.sliding_layers else 0


def mlp_activation_bytes(g: Geometry, b: int, t: int) -> int:
    """What the MLP (or the expert block) of one layer saves, over ``t`` tokens."""
    e = g.experts
    if e is None:
        return (2 if g.mlp == "plain" else 4) * b * t * g.intermediate_size
    rows = t * e.active
    saved = 2 * g.hidden_size + e.block.width_saves * e.width
    return b * rows * saved + 4 * t * e.count + 40 * rows


def layer_activation_bytes(g: Geometry, b: int, batch: int, seq: int, attention: str,
                           *, tp: int = 1) -> int:
    """Bytes one decoder layer saves for backward without checkpointing, on one rank of
    a tensor-parallel group of ``tp`` (`fsdpspec.plan.tensor_parallel`): the hidden
    states between the blocks over 1/tp of the positions, each block's gathered input
    whole, the per-head and per-column tensors of the local heads and MLP columns."""
    t, local = batch * seq, local_geometry(g, tp)
    hidden = t * g.hidden_size
    total = 2 * norm_bytes(g, b, hidden, tp=tp)
    if g.parallel_residual:
        total -= b * hidden // tp
    if g.norms_per_layer == 4:
        total += 2 * 8 * hidden // tp  # Gemma's post-norms: fp32 input and value
    if g.qk_norm:
        # Their outputs feed the rotary embedding, which saves nothing of them.
        total += (8 if g.fp32_norm else 4 + b) * t * (local.q_width + local.kv_width)
    total += _attention_bytes(local, b, batch, seq, attention)
    total += g.layer_dropout_masks * hidden // tp  # bool masks
    return total + mlp_activation_bytes(local, b, t)


def checkpointed_layer_bytes(g: Geometry, b: int, batch: int, seq: int, *, tp: int = 1) -> int:
    """A checkpointed layer keeps only its input hidden states (1/tp of the positions
    under sequence parallelism)."""
    return b * batch * seq * g.hidden_size // tp


def root_activation_bytes(g: Geometry, b: int, batch: int, seq: int, *, tp: int = 1) -> int:
    """The final norm (feeding lm_head), the rotary cos/sin shared by every layer, the
    embeddings' dropout mask, and a Mixture-of-Experts model's router probabilities saved
    by its load-balancing loss."""
    t = batch * seq
    total = norm_bytes(g, b, t * g.hidden_size, tp=tp) + 2 * b * t * g.head_dim
    if g.embedding_dropout_mask:
        total += t * g.hidden_size // tp  # a bool mask
    if g.experts:
        total += 4 * g.num_layers * t * g.experts.count
    return total


def router_loss_bytes(g: Geometry, b: int, batch: int, seq: int) -> int:
    """While the load-balancing loss is computed: every layer's router logits (returned
    with the output) and the one-hot of the routing choices (int64, then fp32)."""
    if g.experts is None:
        return 0
    e, tokens = g.experts, g.num_layers * batch * seq
    return b * tokens * e.count + 12 * tokens * e.active * e.count


# Loss parallel (torch's `tensor/parallel/loss.py`) on the vocabulary-split logits, fp32
# bytes per local logit (torch's MemTracker on FakeTensorMode, DTensor's propagation
# kept apart as on a GPU): its log-softmax is decomposed, so forward (`_log_softmax`)
# holds the fp32 upcast, x − max and its exp (then the log-softmax) beside the logits;
# backward (`_nll_loss_and_log_softmax_backward`) the saved log-softmax, the zeros it
# scatters the targets into, exp(x) and their sum (then its product with the gradient).
LOSS_PARALLEL_FORWARD_BYTES = 12
LOSS_PARALLEL_BACKWARD_BYTES = 16


def logits_forward_bytes(g: Geometry, b: int, batch: int, seq: int, *,
                         loss_parallel: bool = False) -> int:
    """At the cross entropy in forward: the logits, their fp32 upcast and the fp32
    log-softmax saved for backward (the engine shifts the labels, not the logits, so
    every position is scored and nothing is copied); under loss parallel
    (``g`` the rank's vocabulary shard) `LOSS_PARALLEL_FORWARD_BYTES` beside them."""
    tokens_vocab = batch * seq * g.vocab_size
    total = b * tokens_vocab + 4 * tokens_vocab
    if loss_parallel:
        total = (b + LOSS_PARALLEL_FORWARD_BYTES) * tokens_vocab
    elif b < 4:
        total += 4 * tokens_vocab
    if g.final_softcap:
        total += 2 * b * tokens_vocab  # the scaled logits and their tanh
    return total


def logits_backward_bytes(g: Geometry, b: int, batch: int, seq: int, *,
                          loss_parallel: bool = False) -> int:
    """The start of backward: the saved fp32 log-softmax, the gradient arriving at it
    and the gradient it produces (all fp32); under loss parallel
    `LOSS_PARALLEL_BACKWARD_BYTES` per local logit."""
    per_logit = LOSS_PARALLEL_BACKWARD_BYTES if loss_parallel else 12
    total = per_logit * batch * seq * g.vocab_size
    if g.final_softcap:
        total += b * batch * seq * g.vocab_size
    return total


def backward_temporaries(g: Geometry, b: int, batch: int, seq: int, attention: str) -> int:
    """Gradients of activations alive at once inside one layer's backward: in the MLP,
    the gradients of the product and of the up/gate branches (a plain MLP has one
    branch: the activation's gradient alone); in eager attention, the gradient of the
    probabilities (fp32) and of the scores."""
    t = batch * seq
    rows, width = (t * g.experts.active, g.experts.width) if g.experts else \
        (t, g.intermediate_size)
    branches = 1 if g.mlp == "plain" and not g.experts else 2
    mlp = branches * b * rows * width + b * rows * g.hidden_size
    if attention != "eager":
        return mlp
    scores = 4 * batch * g.num_heads * seq * seq
    return max(mlp, 2 * scores)
