"""FS23x, FS55x: the memory levers (chunked loss, activation offload, optimizer state
precision) in combinations the engine cannot run."""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.plan.memory_levers import int8_states_apply, loss_chunks_apply, peft_wraps_head
from fsdpspec.spec.diagnostics import Diagnostic, Severity


@rule("FS230", "activation-offload-on-cpu", Severity.ERROR,
      "fsdp.activation_offload on accelerator cpu",
      "remove fsdp.activation_offload, or run on GPUs")
def activation_offload_on_cpu(ctx: LintContext) -> Iterator[Diagnostic]:
    """Activation offload copies the tensors autograd saves from the device to pinned
    host memory. On `accelerator: cpu` they are in host memory already: there is
    nothing to offload, and the engine refuses rather than pretend.

    FAIL:

        resources: {accelerator: cpu}
        fsdp: {activation_offload: true}

    PASS:

        resources: {accelerator: H100-80GB}
        fsdp: {activation_offload: true, mixed_precision: bf16}
    """
    spec = ctx.spec
    if spec.fsdp.activation_offload and spec.resources.accelerator == "cpu":
        yield diagnostic("FS230", "fsdp.activation_offload has nothing to move on accelerator "
                         "cpu: saved tensors are in host memory already",
                         "/fsdp/activation_offload")


@rule("FS231", "chunked-loss-needs-transformers-head", Severity.ERROR,
      "train.loss_chunks with a factory model, FSDP1, or peft on lm_head",
      "set train.loss_chunks: 1, or use a preset / hf_config model under fsdp.version 2")
def chunked_loss_needs_transformers_head(ctx: LintContext) -> Iterator[Diagnostic]:
    """The chunked loss runs the model up to its final norm and applies the output
    projection (`get_output_embeddings()`, transformers' soft-capping included) chunk by
    chunk. A factory model returns bare logits and has no such projection to take over;
    under FSDP1 the projection's flat parameter is not handled by the engine's chunks;
    a LoRA on lm_head, or lm_head in `peft.modules_to_save`, replaces the projection with
    peft's wrapper, whose additions the chunks would skip.

    FAIL:

        model: {preset: null, factory: "mypkg.models:build"}
        train: {loss_chunks: 8}

    PASS:

        model: {preset: tiny-llama}
        train: {loss_chunks: 8}
    """
    spec = ctx.spec
    if spec.train.loss_chunks == 1 or loss_chunks_apply(spec):
        return
    if spec.model.factory:
        yield diagnostic("FS231", "train.loss_chunks needs a transformers model's output "
                         "projection; a factory model returns its logits", "/train/loss_chunks")
    elif spec.fsdp.version == 1:
        yield diagnostic("FS231", "train.loss_chunks runs under fsdp.version 2 only",
                         "/train/loss_chunks")
    elif peft_wraps_head(spec):
        yield diagnostic("FS231", "train.loss_chunks applies lm_head's weight chunk by "
                         "chunk; peft replaces lm_head here (an adapter or a trained copy)",
                         "/train/loss_chunks")


@rule("FS550", "state-dtype-needs-adamw", Severity.ERROR,
      "optimizer.state_dtype other than float32 with SGD",
      "use optimizer.name: adamw, or state_dtype: float32")
def state_dtype_needs_adamw(ctx: LintContext) -> Iterator[Diagnostic]:
    """`optimizer.state_dtype` chooses how AdamW stores its two moments (bf16, or
    torchao's 8-bit blocks). SGD's momentum buffer is always fp32: the field would be
    dropped.

    FAIL:

        optimizer: {name: sgd, state_dtype: bfloat16}

    PASS:

        optimizer: {name: adamw, state_dtype: bfloat16}
    """
    optimizer = ctx.spec.optimizer
    if optimizer.name != "adamw" and optimizer.state_dtype != "float32":
        yield diagnostic("FS550", f"optimizer.state_dtype {optimizer.state_dtype} applies to "
                         "AdamW's moments; SGD keeps fp32 momentum", "/optimizer/state_dtype")


@rule("FS551", "int8-states-need-sharded-fsdp2", Severity.ERROR,
      "optimizer.state_dtype int8 with FSDP1 or FULL_STATE_DICT",
      "use fsdp.version: 2 with SHARDED_STATE_DICT, or state_dtype: bfloat16")
def int8_states_need_sharded_fsdp2(ctx: LintContext) -> Iterator[Diagnostic]:
    """torchao's 8-bit states are tensor subclasses. The engine checkpoints and resumes
    them exactly through torch.distributed.checkpoint under FSDP2's sharded state dict;
    FSDP1's flat-parameter optimizer state and the rank-0 full state dict are not
    checked with them, so they are refused.

    FAIL:

        fsdp: {version: 2, state_dict_type: FULL_STATE_DICT}
        optimizer: {state_dtype: int8}

    PASS:

        fsdp: {version: 2, state_dict_type: SHARDED_STATE_DICT}
        optimizer: {state_dtype: int8}
    """
    spec = ctx.spec
    if spec.optimizer.state_dtype != "int8" or int8_states_apply(spec):
        return
    if spec.fsdp.version == 1:
        yield diagnostic("FS551", "optimizer.state_dtype int8 runs under fsdp.version 2 only",
                         "/optimizer/state_dtype")
    elif spec.fsdp.state_dict_type == "FULL_STATE_DICT":
        yield diagnostic("FS551", "optimizer.state_dtype int8 checkpoints as "
                         "SHARDED_STATE_DICT only", "/optimizer/state_dtype")
