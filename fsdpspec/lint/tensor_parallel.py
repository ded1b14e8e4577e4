"""FS17x–FS18x: tensor parallelism (`parallelism.tensor_parallel`).

The engine follows torchtitan's plan: query, key, value, gate and up projections split
column-wise (by head, by MLP column), output and down projections row-wise, the
embedding and output head by vocabulary row, the norms sequence-parallel (each rank
holds 1/tp of the sequence between the blocks). Every split must be whole, and the
ranks of one tensor-parallel group talk at every layer. Degrees are read from
`job.layout.dims` (`ParallelDims`), never from the raw field.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from fsdpspec.job.parallel import ParallelDimsError
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.plan.tensor_parallel import across_nodes_cost, refusal, splits
from fsdpspec.spec.diagnostics import Diagnostic, Severity

_DEGREE = "/parallelism/tensor_parallel"


def _tp(ctx: LintContext) -> int:
    return ctx.job.layout.dims.tp


def _divisors(n: int, within: int) -> list[int]:
    """The degrees above 1, up to ``within``, that divide ``n``: found in pairs up to
    its square root, never by counting to ``within`` (a degree the user wrote)."""
    small = [d for d in range(2, math.isqrt(n) + 1) if n % d == 0]
    pairs = sorted({*small, *(n // d for d in small), n} - {1})
    return [d for d in pairs if d <= within] or [1]


def _indivisible(ctx: LintContext, code: str, key: str) -> Iterator[Diagnostic]:
    """The finding of ``code`` when the degree does not divide the geometry's split
    ``key`` (`tensor_parallel.splits`)."""
    g, tp = ctx.geometry(), _tp(ctx)
    if g is None or tp == 1:
        return
    what, count = splits(g)[key]
    if count % tp:
        within = max(tp, ctx.spec.resources.gpus_per_node)
        yield diagnostic(code, f"tensor_parallel {tp} does not divide the model's {count} "
                         f"{what}", _DEGREE,
                         f"use a tensor_parallel among {_divisors(count, within)}")


@rule("FS170", "tp-heads", Severity.ERROR,
      "the tensor-parallel degree does not divide the attention heads",
      "use a tensor_parallel that divides num_attention_heads")
def tp_heads(ctx: LintContext) -> Iterator[Diagnostic]:
    """The query projection is split column-wise by head: each rank computes
    heads ÷ tensor_parallel whole heads. A fraction of a head cannot be attended.

    FAIL:

        model: {hf_config: models/tp-heads-6}
        resources: {accelerator: cpu, gpus_per_node: 4}
        parallelism: {tensor_parallel: 4}

    PASS:

        model: {hf_config: models/tp-heads-6}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {tensor_parallel: 2}
    """
    yield from _indivisible(ctx, "FS170", "num_heads")


def _heads_split(ctx: LintContext) -> bool:
    """The key/value rules speak only once the query heads split (else FS170 says it)."""
    g = ctx.geometry()
    return g is not None and _tp(ctx) > 1 and g.num_heads % _tp(ctx) == 0


@rule("FS171", "tp-kv-heads", Severity.ERROR,
      "the tensor-parallel degree does not divide the key/value heads",
      "use a tensor_parallel that divides num_key_value_heads")
def tp_kv_heads(ctx: LintContext) -> Iterator[Diagnostic]:
    """Key and value projections are split column-wise by head like the query: each
    rank keeps kv_heads ÷ tensor_parallel of them, the ones its query heads read.

    FAIL:

        model: {hf_config: models/tp-kv-6}
        resources: {accelerator: cpu, gpus_per_node: 4}
        parallelism: {tensor_parallel: 4}

    PASS:

        model: {hf_config: models/tp-kv-6}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {tensor_parallel: 2}
    """
    g = ctx.geometry()
    if _heads_split(ctx) and g.num_kv_heads >= _tp(ctx):
        yield from _indivisible(ctx, "FS171", "num_kv_heads")


@rule("FS172", "tp-kv-heads-fewer", Severity.ERROR,
      "fewer key/value heads than the tensor-parallel degree",
      "use a tensor_parallel no larger than num_key_value_heads")
def tp_kv_heads_fewer(ctx: LintContext) -> Iterator[Diagnostic]:
    """With fewer key/value heads than ranks, some rank would hold a fraction of one.
    Refused, not replicated: the engine splits the key and value projections
    column-wise as torchtitan does, and replicating them would train every copy on its
    own rank's queries (their gradients would need a reduction the plan does not make).

    FAIL:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 4}
        parallelism: {tensor_parallel: 4}

    PASS:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {tensor_parallel: 2}
    """
    g, tp = ctx.geometry(), _tp(ctx)
    if _heads_split(ctx) and g.num_kv_heads < tp:
        yield diagnostic("FS172", f"{g.num_kv_heads} key/value head(s) cannot "
                         f"be split over tensor_parallel {tp} (the engine shards them, it "
                         "does not replicate them)", _DEGREE,
                         f"use a tensor_parallel among {_divisors(g.num_kv_heads, tp)}")


@rule("FS173", "tp-intermediate", Severity.ERROR,
      "the tensor-parallel degree does not divide the MLP width",
      "use a tensor_parallel that divides intermediate_size")
def tp_intermediate(ctx: LintContext) -> Iterator[Diagnostic]:
    """The gate and up projections are split column-wise and the down projection
    row-wise over the MLP's intermediate width: each rank computes a whole slice of it.

    FAIL:

        model: {hf_config: models/tp-mlp-129}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {tensor_parallel: 2}
    """
    g = ctx.geometry()
    if g is not None and g.experts is None:  # a Mixture of Experts is FS181's
        yield from _indivisible(ctx, "FS173", "intermediate_size")


@rule("FS174", "tp-vocab", Severity.ERROR,
      "the tensor-parallel degree does not divide the vocabulary",
      "use a tensor_parallel that divides vocab_size, or pad the vocabulary to a multiple")
def tp_vocab(ctx: LintContext) -> Iterator[Diagnostic]:
    """The embedding and the output head are split by vocabulary row, and the loss is
    computed on each rank's slice of the logits (loss parallel): every rank needs the
    same number of rows. A config whose vocabulary is padded to a multiple of the
    degree (as most published ones are, to 64 or 128) passes.

    FAIL:

        model: {hf_config: models/tp-vocab-321}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {tensor_parallel: 2}
    """
    yield from _indivisible(ctx, "FS174", "vocab_size")


@rule("FS175", "tp-sequence", Severity.ERROR,
      "the tensor-parallel degree does not divide the sequence length",
      "use a data.seq_len that is a multiple of tensor_parallel")
def tp_sequence(ctx: LintContext) -> Iterator[Diagnostic]:
    """Sequence parallelism splits the hidden states between the blocks (norms,
    residuals, dropout) by position: each rank of the group holds seq_len ÷
    tensor_parallel positions.

    FAIL:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        data: {seq_len: 63}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        data: {seq_len: 64}
        parallelism: {tensor_parallel: 2}
    """
    tp, seq = _tp(ctx), ctx.job.batch.seq
    if tp > 1 and seq % tp:
        up = -(-seq // tp) * tp
        yield diagnostic("FS175", f"sequence parallelism splits seq_len {seq} over "
                         f"tensor_parallel {tp}: not a whole number of positions per rank",
                         "/data/seq_len", f"use data.seq_len {up} (or {up - tp})"
                         if up > tp else None)


@rule("FS176", "tp-world", Severity.ERROR,
      "the world size is not a multiple of tensor_parallel × context_parallel",
      "use a tensor_parallel that divides nodes × gpus_per_node")
def tp_world(ctx: LintContext) -> Iterator[Diagnostic]:
    """The ranks form groups of tensor_parallel × context_parallel, and FSDP shards
    over the groups: the world size must be a whole number of them (the one check of
    `ParallelDims.validate`, which the engine's mesh calls too).

    FAIL:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 3}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 4}
        parallelism: {tensor_parallel: 2}
    """
    dims = ctx.job.layout.dims
    if not dims.tp_enabled:
        return
    try:
        dims.validate()
    except ParallelDimsError as exc:
        if exc.field == "/parallelism":
            yield diagnostic("FS176", str(exc), _DEGREE,
                             f"use a tensor_parallel among "
                             f"{_divisors(dims.world_size // dims.cp, dims.world_size)}")


@rule("FS177", "tp-across-nodes", Severity.WARNING,
      "a tensor-parallel group spans nodes: its per-layer collectives cross the network",
      "use a tensor_parallel that divides gpus_per_node, and FSDP across the nodes")
def tp_across_nodes(ctx: LintContext) -> Iterator[Diagnostic]:
    """Tensor parallelism all-gathers and reduce-scatters the activations four times a
    layer in forward and again in backward, on the critical path (nothing overlaps
    them). Inside a node they run over NVLink; a group that spans nodes (a degree
    above gpus_per_node, or one that does not divide it) runs them over the network,
    several times slower. Legal, and the warning says what it costs.

    FAIL:

        model: {preset: llama3-8b}
        resources: {accelerator: H100-80GB, nodes: 2, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        data: {seq_len: 2048}
        launch: {rdzv_endpoint: "node0:29500"}
        parallelism: {tensor_parallel: 8}

    PASS:

        model: {preset: llama3-8b}
        resources: {accelerator: H100-80GB, nodes: 2, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        data: {seq_len: 2048}
        launch: {rdzv_endpoint: "node0:29500"}
        parallelism: {tensor_parallel: 4}
    """
    dims, per_node = ctx.job.layout.dims, ctx.spec.resources.gpus_per_node
    if not dims.tp_enabled or per_node % dims.tp == 0 or ctx.geometry() is None:
        return
    try:
        dims.validate()
    except ParallelDimsError:
        return  # no groups to place (FS176)
    cost = across_nodes_cost(ctx.job, ctx.spec.device())
    yield diagnostic("FS177", f"tensor_parallel {dims.tp} groups span nodes of {per_node} "
                     f"GPU{'s' * (per_node != 1)}: {cost}", _DEGREE,
                     f"use a tensor_parallel among {_divisors(per_node, per_node)}")


@rule("FS178", "tp-fsdp1", Severity.ERROR,
      "tensor parallelism with FSDP1",
      "set fsdp.version: 2 (fully_shard composes with tensor parallelism)")
def tp_fsdp1(ctx: LintContext) -> Iterator[Diagnostic]:
    """The engine shards a tensor-parallel model with FSDP2's ``fully_shard`` over the
    data-parallel sub-mesh, which takes the DTensor parameters that tensor parallelism
    makes; FSDP1 flattens each unit into one plain tensor and cannot hold them.

    FAIL:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        fsdp: {version: 1}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        fsdp: {version: 2}
        parallelism: {tensor_parallel: 2}
    """
    if _tp(ctx) > 1 and ctx.job.layout.fsdp_version == 1:
        yield diagnostic("FS178", "tensor_parallel > 1 needs FSDP2; fsdp.version is 1",
                         ctx.first_set("/fsdp/version", _DEGREE))


@rule("FS179", "tp-no-shard", Severity.ERROR,
      "tensor parallelism with NO_SHARD",
      "use FULL_SHARD or SHARD_GRAD_OP (HYBRID_SHARD to replicate across nodes)")
def tp_no_shard(ctx: LintContext) -> Iterator[Diagnostic]:
    """NO_SHARD replicates the model over the data-parallel ranks as DDP does (in full
    precision it runs as DDP, `runs_as_ddp`), whose reducer buckets plain tensors and
    cannot take the DTensor parameters of tensor parallelism; the engine refuses the
    pair at every precision rather than run a replication it does not test. With
    tensor parallelism, shard over the data-parallel ranks instead.

    FAIL:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 4}
        fsdp: {sharding_strategy: NO_SHARD, mixed_precision: fp32}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 4}
        fsdp: {sharding_strategy: FULL_SHARD, mixed_precision: fp32}
        parallelism: {tensor_parallel: 2}
    """
    if _tp(ctx) > 1 and ctx.job.layout.written_strategy == "NO_SHARD":
        yield diagnostic("FS179", "NO_SHARD replicates the model as DDP does, which cannot "
                         "hold tensor-parallel parameters", "/fsdp/sharding_strategy")


@rule("FS180", "tp-lora", Severity.ERROR,
      "LoRA or QLoRA with tensor parallelism",
      "set parallelism.tensor_parallel: 1 (FSDP alone shards a LoRA's frozen base)")
def tp_lora(ctx: LintContext) -> Iterator[Diagnostic]:
    """Refused, and why: peft replaces each adapted ``nn.Linear`` with a wrapper (its
    base layer beside ``lora_A`` and ``lora_B``), so the column- and row-wise plans,
    which split ``nn.Linear`` modules by name, no longer find them; split by hand, a
    column-wise projection needs ``lora_A`` whole and ``lora_B`` split by rows, a
    row-wise one the reverse, which neither peft nor the engine sets up, and QLoRA's
    4-bit blocks cannot be split as DTensors at all. A LoRA's activations and states
    are small: FSDP alone (with activation checkpointing) holds it.

    FAIL:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        peft: {method: lora}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        peft: {method: lora}
        parallelism: {tensor_parallel: 1}
    """
    peft = ctx.spec.peft
    if _tp(ctx) > 1 and peft is not None:
        yield diagnostic("FS180", f"{peft.method} adapters are not split by tensor "
                         "parallelism (peft wraps the projections the plan splits)",
                         ctx.first_set("/peft/method", "/peft"))


@rule("FS181", "tp-moe", Severity.ERROR,
      "tensor parallelism of a Mixture of Experts",
      "set parallelism.tensor_parallel: 1 (FSDP shards the experts; "
      "parallelism.expert_parallel spreads them over ranks)")
def tp_moe(ctx: LintContext) -> Iterator[Diagnostic]:
    """A Mixture of Experts keeps its experts as stacked 3-D tensors run by a grouped
    matmul, which the column- and row-wise plans (made for ``nn.Linear``) do not split
    (expert tensor parallelism); spreading experts over ranks is expert parallelism
    (`parallelism.expert_parallel`, FS16x). torchtitan also runs tensor parallelism of
    the dense parts beside expert parallelism; the engine does not in this release, so
    tensor parallelism of a Mixture of Experts is refused with or without it.

    FAIL:

        model: {preset: tiny-mixtral}
        resources: {accelerator: cpu, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-mixtral}
        resources: {accelerator: cpu, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        parallelism: {tensor_parallel: 1}
    """
    g = ctx.geometry()
    if _tp(ctx) > 1 and g is not None and g.experts is not None:
        yield diagnostic("FS181", f"the model's {g.experts.count} experts are not split by "
                         "tensor parallelism", _DEGREE)


@rule("FS182", "tp-family-unplanned", Severity.ERROR,
      "tensor parallelism of a model whose family has no tensor-parallel plan",
      "set parallelism.tensor_parallel: 1 (FSDP alone shards it)")
def tp_family_unplanned(ctx: LintContext) -> Iterator[Diagnostic]:
    """The engine splits a model by its family's plan (`Family.tensor_parallel_plan`:
    which module is split column-wise, row-wise or by vocabulary). Some families have
    none, and the refusal says why: Phi-3's fused q/k/v and gate/up projections (a
    column split would give one rank the queries, another the values), OLMo 2's q/k
    norms over every head at once, a factory model or one introspected from its config
    (no transformers names to split by). A Mixture of Experts is FS181's.

    FAIL:

        model: {preset: tiny-olmo2}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-olmo2}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {tensor_parallel: 1}
    """
    g = ctx.geometry()
    if _tp(ctx) == 1 or g is None or g.experts is not None:
        return
    why = refusal(g)
    if why is not None:
        yield diagnostic("FS182", f"tensor parallelism cannot split {g.family}: {why}",
                         _DEGREE)


@rule("FS183", "tp-loss-chunks", Severity.ERROR,
      "train.loss_chunks with tensor parallelism",
      "set train.loss_chunks: 1: loss parallel already keeps 1/tensor_parallel of the logits")
def tp_loss_chunks(ctx: LintContext) -> Iterator[Diagnostic]:
    """The chunked loss applies the output projection's weight itself, chunk by chunk,
    outside the model; under tensor parallelism that weight is split by vocabulary and
    the cross entropy runs on the split logits (loss parallel), which the chunks would
    bypass. Loss parallel is the same saving: each rank holds 1/tensor_parallel of the
    logits.

    FAIL:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        train: {loss_chunks: 4}
        parallelism: {tensor_parallel: 2}

    PASS:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        train: {loss_chunks: 1}
        parallelism: {tensor_parallel: 2}
    """
    if _tp(ctx) > 1 and ctx.spec.train.loss_chunks > 1:
        yield diagnostic("FS183", f"train.loss_chunks {ctx.spec.train.loss_chunks} bypasses "
                         "loss parallel's split logits", "/train/loss_chunks")
