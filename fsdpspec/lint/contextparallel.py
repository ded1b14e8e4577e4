"""FS19x: context parallelism — what torch's ring attention (`context_parallel`, around
SDPA) can split, and the layouts the engine runs it in.

The engine splits each sequence over ``parallelism.context_parallel`` ranks with load
balancing (two chunks per rank, torch's head-tail balancer), patches SDPA with ring
attention for the forward and backward, and shards FSDP over the data-parallel ×
context-parallel ranks (``dp_shard_cp``). What that cannot run is refused here, at
`validate`, never at run time.
"""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity

_CP = "/parallelism/context_parallel"


def _cp(ctx: LintContext) -> int:
    return ctx.job.layout.dims.cp


@rule("FS190", "context-parallel-cpu", Severity.ERROR,
      "context parallelism on a CPU: torch has no ring attention for CPU SDPA",
      "run context parallelism on GPUs, or set parallelism.context_parallel: 1")
def context_parallel_cpu(ctx: LintContext) -> Iterator[Diagnostic]:
    """Torch's context parallelism replaces the SDPA kernel with a ring of per-chunk
    kernels, and only the CUDA kernels (flash, memory-efficient, cuDNN) have one: the
    CPU kernel, `aten._scaled_dot_product_flash_attention_for_cpu`, has no sharding
    strategy (torch 2.13), so every rank would fail in its first forward.

    FAIL:

        resources: {accelerator: cpu, gpus_per_node: 2}
        parallelism: {context_parallel: 2}

    PASS:

        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        parallelism: {context_parallel: 2}
    """
    cp = _cp(ctx)
    if cp > 1 and not ctx.spec.device().is_gpu:
        yield diagnostic("FS190", f"context_parallel {cp} on a CPU: torch has no ring "
                         "attention for aten._scaled_dot_product_flash_attention_for_cpu",
                         ctx.first_set(_CP, "/resources/accelerator"))


@rule("FS191", "context-parallel-seq-divisible", Severity.ERROR,
      "data.seq_len is not a multiple of 2 × context_parallel",
      "use a seq_len divisible by 2 × parallelism.context_parallel")
def context_parallel_seq_divisible(ctx: LintContext) -> Iterator[Diagnostic]:
    """The load balancer cuts each sequence into 2 × cp chunks and gives each rank one
    from the head and one from the tail, so that causal attention costs every rank the
    same; the chunks must be of one size.

    FAIL:

        resources: {accelerator: H100-80GB, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        data: {seq_len: 100}
        parallelism: {context_parallel: 4}

    PASS:

        resources: {accelerator: H100-80GB, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        data: {seq_len: 128}
        parallelism: {context_parallel: 4}
    """
    cp, seq = _cp(ctx), ctx.job.batch.seq
    if cp > 1 and seq % (2 * cp):
        yield diagnostic("FS191", f"seq_len {seq} is not a multiple of 2 × context_parallel "
                         f"{cp} = {2 * cp}", "/data/seq_len",
                         f"use seq_len {seq // (2 * cp) * 2 * cp or 2 * cp} or "
                         f"{(seq // (2 * cp) + 1) * 2 * cp}")


@rule("FS192", "context-parallel-attention", Severity.ERROR,
      "context parallelism needs SDPA attention",
      "set model.attention: sdpa")
def context_parallel_attention(ctx: LintContext) -> Iterator[Diagnostic]:
    """Ring attention is installed in place of `torch.nn.functional.scaled_dot_product_
    attention`; eager attention (a softmax of the whole score matrix), flash_attention_2
    (its own kernel) and FlexAttention never call it, so each rank would attend over its
    own chunks only. `auto` resolves to what transformers picks for the model (eager for
    Gemma 2's soft-capping and gpt-oss's sinks).

    FAIL:

        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        model: {preset: tiny-llama, attention: eager}
        parallelism: {context_parallel: 2}

    PASS:

        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        model: {preset: tiny-llama, attention: sdpa}
        parallelism: {context_parallel: 2}
    """
    if _cp(ctx) > 1 and ctx.job.attention != "sdpa":
        yield diagnostic("FS192", f"context parallelism runs ring attention around SDPA, "
                         f"not {ctx.job.attention} attention",
                         ctx.first_set("/model/attention", _CP))


@rule("FS193", "context-parallel-sliding-window", Severity.ERROR,
      "context parallelism with a sliding-window model longer than its window",
      "use seq_len up to the window, or parallelism.context_parallel: 1")
def context_parallel_sliding_window(ctx: LintContext) -> Iterator[Diagnostic]:
    """Ring attention is causal over the whole sequence: it has no window. A model with
    sliding-window layers (Mistral v0.1, Gemma 3, StarCoder 2, Qwen 2 with use_sliding_window)
    attends only within the window once the sequence is longer than it.

    FAIL:

        resources: {accelerator: H100-80GB, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        model: {preset: tiny-gemma3, attention: sdpa}  # sliding_window: 8
        data: {seq_len: 64}
        parallelism: {context_parallel: 4}

    PASS:

        resources: {accelerator: H100-80GB, gpus_per_node: 4}
        fsdp: {mixed_precision: bf16}
        model: {preset: tiny-llama, attention: sdpa}
        data: {seq_len: 64}
        parallelism: {context_parallel: 4}
    """
    g, seq = ctx.job.geometry, ctx.job.batch.seq
    if _cp(ctx) > 1 and g is not None and g.sliding_window and g.sliding_layers \
            and seq > g.sliding_window:
        yield diagnostic("FS193", f"seq_len {seq} exceeds the model's sliding window "
                         f"{g.sliding_window}, which ring attention does not apply",
                         ctx.first_set("/data/seq_len", _CP))


@rule("FS194", "context-parallel-examples", Severity.ERROR,
      "context parallelism with chat or prompt_completion examples",
      "use data.format: text (documents packed end to end), or context_parallel: 1")
def context_parallel_examples(ctx: LintContext) -> Iterator[Diagnostic]:
    """Chat and prompt_completion sequences restart their positions at every example
    (packed) or pad it (not packed), and keep attention within each example with a
    mask; ring attention is causal over the whole sequence and takes no mask.

    FAIL:

        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        data: {source: dataset, path: models/chats, format: chat,
               tokenizer: models/tokenizer-chat}
        parallelism: {context_parallel: 2}

    PASS:

        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        data: {source: dataset, path: models/chats, format: text, text_field: messages}
        parallelism: {context_parallel: 2}
    """
    fmt = ctx.spec.data.format
    if _cp(ctx) > 1 and fmt != "text":
        yield diagnostic("FS194", f"{fmt} examples need a mask per example, which ring "
                         "attention does not take", "/data/format")


@rule("FS195", "context-parallel-layout", Severity.ERROR,
      "context parallelism with FSDP1, NO_SHARD or tensor parallelism",
      "use FSDP2 (fsdp.version: 2) with a sharded strategy, and tensor_parallel: 1")
def context_parallel_layout(ctx: LintContext) -> Iterator[Diagnostic]:
    """The engine runs context parallelism as torchtitan does: FSDP2's `fully_shard`
    over the flattened data-parallel × context-parallel mesh (``dp_shard_cp``), since
    each cp rank computes gradients of its own tokens. FSDP1 takes no such mesh;
    NO_SHARD (or DDP) has no shard dimension to hold the cp ranks; and context
    parallelism beside tensor parallelism is not in this release.

    FAIL:

        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {version: 1, mixed_precision: bf16}
        parallelism: {context_parallel: 2}

    PASS:

        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {version: 2, sharding_strategy: FULL_SHARD, mixed_precision: bf16}
        parallelism: {context_parallel: 2}
    """
    dims = ctx.job.layout.dims
    if dims.cp == 1:
        return
    if ctx.job.layout.fsdp_version == 1:
        yield diagnostic("FS195", "context parallelism needs FSDP2's fully_shard over "
                         "dp_shard_cp; FSDP1 takes one process group", "/fsdp/version")
    elif dims.written_strategy == "NO_SHARD":
        yield diagnostic("FS195", "NO_SHARD has no shard dimension for the context-parallel "
                         "ranks (FSDP shards over dp_shard × cp)", "/fsdp/sharding_strategy")
    if dims.tp_enabled:
        yield diagnostic("FS195", f"context_parallel {dims.cp} with tensor_parallel "
                         f"{dims.tp} is not in this release", _CP)


@rule("FS196", "context-parallel-peft", Severity.ERROR,
      "context parallelism with a LoRA or QLoRA fine-tune",
      "remove peft, or set parallelism.context_parallel: 1")
def context_parallel_peft(ctx: LintContext) -> Iterator[Diagnostic]:
    """The adapter path (frozen base, quantised QLoRA weights, the adapter export) has
    not been run under ring attention on GPUs, so it is refused rather than assumed.

    FAIL:

        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        peft: {method: lora}
        parallelism: {context_parallel: 2}

    PASS:

        resources: {accelerator: H100-80GB, gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        peft: null
        parallelism: {context_parallel: 2}
    """
    if _cp(ctx) > 1 and ctx.job.adapters is not None:
        yield diagnostic("FS196", f"{ctx.spec.peft.method} with context parallelism is not "
                         "in this release", "/peft")
