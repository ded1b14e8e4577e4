"""FS16x: Mixtures of Experts: expert parallelism (`parallelism.expert_parallel`), and
(FS167) a Mixture of Experts that transformers trains with no load balancing.

torchtitan's layout (expert tensor parallelism 1): each layer's experts are split by
expert index over ``ep`` ranks that swap tokens by all-to-all, and FSDP shards the
local experts over the rest of the ranks that hold different tokens (``efsdp``,
`ParallelDims`). The split must be whole, the layout one the engine builds; what it does
not build is refused here, at `validate`. LoRA and activation checkpointing (op-level
and full) compose with it; tensor parallelism of a Mixture of Experts is FS181's.
"""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.catalog.model_names import of_model_type
from fsdpspec.job.parallel import ParallelDimsError
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.plan.expert_parallel import across_nodes_cost, expert_count, spans_nodes
from fsdpspec.spec.diagnostics import Diagnostic, Severity

_DEGREE = "/parallelism/expert_parallel"


def _ep(ctx: LintContext) -> int:
    return ctx.job.layout.dims.ep


def _degrees(experts: int, ranks: int) -> list[int]:
    """The degrees above 1 that split ``experts`` whole and divide ``ranks``."""
    return [d for d in range(2, min(experts, ranks) + 1)
            if experts % d == 0 and ranks % d == 0] or [1]


def _lays_out(ctx: LintContext) -> bool:
    try:
        ctx.job.layout.dims.validate()
    except ParallelDimsError:
        return False
    return True


@rule("FS160", "ep-no-experts", Severity.ERROR,
      "expert parallelism of a model without experts",
      "set parallelism.expert_parallel: 1, or train a Mixture of Experts")
def ep_no_experts(ctx: LintContext) -> Iterator[Diagnostic]:
    """Expert parallelism splits a Mixture of Experts' experts over ranks; a dense model
    has none to split (its config names no experts module in transformers'
    ``base_model_ep_plan``), nor has Llama 4, whose config names none either
    (transformers runs each of its experts on every token).

    FAIL:

        model: {preset: tiny-llama}
        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {expert_parallel: 2}

    PASS:

        model: {preset: tiny-mixtral}
        resources: {accelerator: cpu, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        parallelism: {expert_parallel: 2}
    """
    if _ep(ctx) > 1 and ctx.job.units is not None and not expert_count(ctx.job.units):
        yield diagnostic("FS160", f"expert_parallel {_ep(ctx)} on {_without_experts(ctx)}",
                         _DEGREE)


def _without_experts(ctx: LintContext) -> str:
    """What the model is: dense, or a Mixture of Experts whose transformers config names
    no experts module (Llama 4's, which runs every expert on every token)."""
    named = of_model_type(ctx.job.geometry.family) if ctx.job.geometry else None
    if named is None or not named.moe:
        return "a model without experts"
    return (f"{named.what} whose transformers config names no experts module to "
            "dispatch tokens to (base_model_ep_plan)")


@rule("FS161", "ep-experts-divisible", Severity.ERROR,
      "the expert-parallel degree does not divide the experts",
      "use an expert_parallel that divides the model's experts per layer")
def ep_experts_divisible(ctx: LintContext) -> Iterator[Diagnostic]:
    """Each rank of an expert-parallel group holds experts ÷ expert_parallel whole
    experts of every layer (torchtitan's split by expert index); a fraction of an expert
    cannot be routed to.

    FAIL:

        model: {preset: tiny-mixtral}
        resources: {accelerator: cpu, gpus_per_node: 8}
        fsdp: {mixed_precision: bf16}
        parallelism: {expert_parallel: 8}

    PASS:

        model: {preset: tiny-mixtral}
        resources: {accelerator: cpu, gpus_per_node: 8}
        fsdp: {mixed_precision: bf16}
        parallelism: {expert_parallel: 4}
    """
    ep, experts = _ep(ctx), expert_count(ctx.job.units)
    if ep > 1 and experts and experts % ep:
        dims = ctx.job.layout.dims
        yield diagnostic("FS161", f"expert_parallel {ep} does not divide the model's "
                         f"{experts} experts per layer", _DEGREE,
                         f"use an expert_parallel among "
                         f"{_degrees(experts, dims.dp_shard * dims.cp * dims.tp)}")


@rule("FS162", "ep-ranks", Severity.ERROR,
      "the expert-parallel degree does not divide the ranks that shard the experts",
      "use an expert_parallel that divides FSDP's shard group × context × tensor parallel")
def ep_ranks(ctx: LintContext) -> Iterator[Diagnostic]:
    """The expert-parallel groups are cut from the ranks that hold different tokens, FSDP's
    shard group × context_parallel × tensor_parallel (each group of cp × tp ranks taken
    whole), and the experts are FSDP-sharded over what is left (``efsdp``,
    `ParallelDims.validate`, torchtitan's rule). A hybrid strategy's shard group (one node
    by default) bounds the degree; so does NO_SHARD's group of one (FS163).

    FAIL:

        model: {preset: tiny-mixtral}
        resources: {accelerator: cpu, gpus_per_node: 6}
        fsdp: {mixed_precision: bf16}
        data: {micro_batch_size: 1, global_batch_size: 6}
        parallelism: {expert_parallel: 4}

    PASS:

        model: {preset: tiny-mixtral}
        resources: {accelerator: cpu, gpus_per_node: 6}
        fsdp: {mixed_precision: bf16}
        data: {micro_batch_size: 1, global_batch_size: 6}
        parallelism: {expert_parallel: 2}
    """
    dims = ctx.job.layout.dims
    if not dims.ep_enabled or dims.written_strategy == "NO_SHARD":
        return
    try:
        dims.validate()
    except ParallelDimsError as exc:
        if exc.field == _DEGREE:
            ranks = dims.dp_shard * dims.cp * dims.tp
            multiple = dims.cp * dims.tp
            fits = [d for d in _degrees(ranks, ranks) if d % multiple == 0] or [1]
            yield diagnostic("FS162", str(exc), _DEGREE, f"use an expert_parallel among {fits}")


@rule("FS163", "ep-layout", Severity.ERROR,
      "expert parallelism with FSDP1 or NO_SHARD",
      "use FSDP2 (fsdp.version: 2) with a sharded strategy")
def ep_layout(ctx: LintContext) -> Iterator[Diagnostic]:
    """The engine shards the experts with FSDP2's ``fully_shard`` over their own sub-mesh
    (``efsdp``) and everything else over ``dp_shard``, as torchtitan does: FSDP1 takes
    one process group for every parameter of a unit. NO_SHARD (and the DDP it runs as)
    has no shard dimension to cut the expert-parallel groups from.

    FAIL:

        model: {preset: tiny-mixtral}
        resources: {accelerator: cpu, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16, version: 1}
        parallelism: {expert_parallel: 2}

    PASS:

        model: {preset: tiny-mixtral}
        resources: {accelerator: cpu, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16, version: 2}
        parallelism: {expert_parallel: 2}
    """
    dims = ctx.job.layout.dims
    if not dims.ep_enabled:
        return
    if ctx.job.layout.fsdp_version == 1:
        yield diagnostic("FS163", f"expert_parallel {dims.ep} needs FSDP2's fully_shard "
                         "over the experts' own sub-mesh; FSDP1 takes one process group",
                         ctx.first_set("/fsdp/version", _DEGREE))
    if dims.written_strategy == "NO_SHARD":
        yield diagnostic("FS163", f"expert_parallel {dims.ep} with NO_SHARD: no shard "
                         "dimension to cut the expert-parallel groups from",
                         ctx.first_set("/fsdp/sharding_strategy", _DEGREE))


@rule("FS164", "ep-context-parallel", Severity.ERROR,
      "expert parallelism with context parallelism",
      "set parallelism.context_parallel: 1, or parallelism.expert_parallel: 1")
def ep_context_parallel(ctx: LintContext) -> Iterator[Diagnostic]:
    """torchtitan lets EP borrow the context-parallel ranks; the engine builds the
    sparse mesh from data-parallel shard ranks only in this release, so the pair is
    refused rather than run untested.

    FAIL:

        model: {preset: tiny-mixtral}
        resources: {accelerator: H100-80GB, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        parallelism: {expert_parallel: 2, context_parallel: 2}

    PASS:

        model: {preset: tiny-mixtral}
        resources: {accelerator: H100-80GB, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        parallelism: {expert_parallel: 2}
    """
    dims = ctx.job.layout.dims
    if dims.ep_enabled and dims.cp_enabled:
        yield diagnostic("FS164", f"expert_parallel {dims.ep} with context_parallel "
                         f"{dims.cp} is not in this release", _DEGREE)


@rule("FS165", "ep-float8", Severity.ERROR,
      "expert parallelism with float8 training",
      "remove the float8 section, or set parallelism.expert_parallel: 1")
def ep_float8(ctx: LintContext) -> Iterator[Diagnostic]:
    """float8 converts the model's ``nn.Linear`` modules (torchao), not the stacked expert
    tensors, and torchtitan's float8 grouped matmuls for routed experts are not what the
    engine runs; expert parallelism beside float8 has not been run, so it is refused
    rather than assumed.

    FAIL:

        model: {preset: tiny-mixtral}
        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        float8: {}
        parallelism: {expert_parallel: 2}

    PASS:

        model: {preset: tiny-mixtral}
        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        float8: null
        parallelism: {expert_parallel: 2}
    """
    if _ep(ctx) > 1 and ctx.spec.float8 is not None:
        yield diagnostic("FS165", f"float8 training with expert_parallel {_ep(ctx)} is not "
                         "in this release", ctx.first_set("/float8", _DEGREE))


@rule("FS166", "ep-across-nodes", Severity.WARNING,
      "an expert-parallel group spans nodes: its all-to-alls cross the network",
      "use an expert_parallel that divides gpus_per_node, and FSDP across the nodes")
def ep_across_nodes(ctx: LintContext) -> Iterator[Diagnostic]:
    """Every MoE layer dispatches its tokens to their experts' ranks and combines the
    outputs by all-to-all, twice in forward and twice in backward (again in a layer
    that recomputes), on the critical path. Inside a node they cross NVLink; a group
    that spans nodes (a degree above gpus_per_node, or one that does not divide it)
    sends the off-node share over the network. Legal (DeepSeek-V3 was trained so), and
    the warning says what it costs under the plan's balanced-routing assumption.

    FAIL:

        model: {preset: mixtral-8x7b}
        resources: {accelerator: H100-80GB, nodes: 8, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        data: {seq_len: 2048, global_batch_size: 32}
        launch: {rdzv_endpoint: "node0:29500"}
        parallelism: {expert_parallel: 8}

    PASS:

        model: {preset: mixtral-8x7b}
        resources: {accelerator: H100-80GB, nodes: 8, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        data: {seq_len: 2048, global_batch_size: 32}
        launch: {rdzv_endpoint: "node0:29500"}
        parallelism: {expert_parallel: 4}
    """
    job, per_node = ctx.job, ctx.spec.resources.gpus_per_node
    if (not spans_nodes(job) or ctx.geometry() is None or not expert_count(job.units)
            or not _lays_out(ctx)):
        return
    yield diagnostic("FS166", f"expert_parallel {job.layout.dims.ep} groups span nodes of "
                     f"{per_node} GPU{'s' * (per_node != 1)}: "
                     f"{across_nodes_cost(job, ctx.spec.device())}", _DEGREE,
                     f"use an expert_parallel among "
                     f"{_degrees(expert_count(job.units), per_node)}")


@rule("FS167", "moe-unbalanced", Severity.WARNING,
      "a Mixture of Experts that trains with no load balancing",
      "nothing balances these experts yet: watch the experts' load, or train a family "
      "with a load-balancing loss (Mixtral, Qwen3-MoE, OLMoE, Phi-3.5-MoE, gpt-oss)")
def moe_unbalanced(ctx: LintContext) -> Iterator[Diagnostic]:
    """The engine adds a model's load-balancing loss to its loss (Mixtral, Qwen3-MoE,
    OLMoE, Phi-3.5-MoE, gpt-oss). transformers' DeepSeek-V3 and GLM-4.5 have none: they
    route with a per-expert bias that DeepSeek nudges by each expert's load outside the
    gradient, a buffer nothing updates here; nor has Llama 4. Their routers may send
    most tokens to a few experts, unlike the run they were released from.

    FAIL:

        model: {preset: deepseek-v3}
        resources: {accelerator: H100-80GB, nodes: 32, gpus_per_node: 8}
        fsdp: {mixed_precision: bf16}
        data: {seq_len: 4096, global_batch_size: 256}
        launch: {rdzv_endpoint: "node0:29500"}
        parallelism: {expert_parallel: 8}

    PASS:

        model: {preset: mixtral-8x7b}
        resources: {accelerator: H100-80GB, nodes: 8, gpus_per_node: 8}
        fsdp: {mixed_precision: bf16}
        data: {seq_len: 4096, global_batch_size: 64}
        launch: {rdzv_endpoint: "node0:29500"}
    """
    named = of_model_type(ctx.job.geometry.family) if ctx.job.geometry else None
    if named is not None and named.unbalanced:
        yield diagnostic("FS167", f"{named.what} trains with no load balancing: "
                         f"{named.unbalanced}", "/model")
