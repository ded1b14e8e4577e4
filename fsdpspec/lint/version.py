"""FS90x: FSDP version — options one FSDP generation honours and the other drops."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.semantics import HYBRID_STRATEGIES
from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.spec.v1 import Fsdp


def _fsdp1_only(fsdp: Fsdp, is_set: Callable[[str], bool]) -> Iterator[str]:
    """Names of the FSDP1-only options this spec asks for."""
    if fsdp.backward_prefetch == "BACKWARD_POST":
        yield "backward_prefetch"
    if fsdp.forward_prefetch:
        yield "forward_prefetch"
    for name in ("limit_all_gathers", "use_orig_params"):
        if is_set(f"/fsdp/{name}") and getattr(fsdp, name) is not None:
            yield name
    # FSDP2 leaves buffers in float32, as the model builds them: only another dtype is lost.
    if is_set("/fsdp/mixed_precision/buffer_dtype") and (
            fsdp.mixed_precision.buffer_dtype != "float32"):
        yield "mixed_precision/buffer_dtype"


@rule("FS901", "fsdp1-option-under-fsdp2", Severity.WARNING,
      "an option only FSDP1 honours is set under fsdp.version 2",
      "remove it, or use fsdp.version: 1")
def fsdp1_option_under_fsdp2(ctx: LintContext) -> Iterator[Diagnostic]:
    """FSDP2 (`fully_shard`) dropped several FSDP1 knobs: `backward_prefetch:
    BACKWARD_POST`, `forward_prefetch`, `limit_all_gathers`, `use_orig_params` and
    `mixed_precision.buffer_dtype` (FSDP2 always prefetches one unit ahead, bounds its
    own memory, keeps the original parameters, and leaves buffers in float32, as the
    model builds them). Under `version: 2` they are ignored.

    FAIL:

        fsdp: {version: 2, forward_prefetch: true, limit_all_gathers: true}

    PASS:

        fsdp: {version: 1, forward_prefetch: true, limit_all_gathers: true}
    """
    fsdp = ctx.spec.fsdp
    if fsdp.version != 2:
        return
    for name in _fsdp1_only(fsdp, ctx.is_set):
        field = name.replace("/", ".")
        yield diagnostic("FS901", f"fsdp.{field} is an FSDP1 option; fsdp.version 2 ignores "
                         "it", f"/fsdp/{name}")


@rule("FS902", "compile-under-fsdp1", Severity.WARNING,
      "train.compile with fsdp.version 1",
      "use fsdp.version: 2 to compile, or set train.compile: false")
def compile_under_fsdp1(ctx: LintContext) -> Iterator[Diagnostic]:
    """`torch.compile` is supported with FSDP2, whose per-parameter sharding traces
    cleanly. FSDP1's flat parameters break the compiled graphs at every unit boundary
    (and need `use_orig_params: true` at all), so compiling under FSDP1 costs compile
    time for little or no speed.

    FAIL:

        fsdp: {version: 1}
        train: {compile: true}

    PASS:

        fsdp: {version: 2}
        train: {compile: true}
    """
    if ctx.spec.train.compile and ctx.spec.fsdp.version == 1:
        yield diagnostic("FS902", "train.compile under FSDP1 compiles around flat "
                         "parameters", "/train/compile")


@rule("FS903", "flat-params-with-checkpointing", Severity.ERROR,
      "FSDP1 with use_orig_params: false and activation checkpointing cannot resume",
      "set fsdp.use_orig_params: true (the default here), or fsdp.version: 2")
def flat_params_with_checkpointing(ctx: LintContext) -> Iterator[Diagnostic]:
    """With `use_orig_params: false` FSDP1 keys the optimizer state by flat parameter,
    and maps it back to names when a checkpoint is saved or loaded. Through the
    activation-checkpointing wrapper that mapping fails in torch (a KeyError naming
    `…_checkpoint_wrapped_module…`), so the run trains but can never resume from its
    checkpoints. `use_orig_params: true` trains the same model with the same memory
    for the parameters, and resumes.

    FAIL:

        fsdp: {version: 1, use_orig_params: false, activation_checkpointing: full}

    PASS:

        fsdp: {version: 1, use_orig_params: true, activation_checkpointing: full}
    """
    fsdp = ctx.spec.fsdp
    if (fsdp.version == 1 and fsdp.use_orig_params is False
            and fsdp.activation_checkpointing != "none"):
        yield diagnostic("FS903", "use_orig_params false with activation checkpointing: "
                         "checkpoints of this run cannot be loaded", "/fsdp/use_orig_params")


@rule("FS904", "flat-params-with-hybrid", Severity.ERROR,
      "FSDP1 with use_orig_params: false and several hybrid shard groups cannot checkpoint",
      "set fsdp.use_orig_params: true (the default here), or fsdp.version: 2")
def flat_params_with_hybrid(ctx: LintContext) -> Iterator[Diagnostic]:
    """With `use_orig_params: false` FSDP1 gathers the optimizer state of a checkpoint by
    broadcasting parameter names from global rank 0 inside each shard group. Under a
    hybrid strategy with more than one shard group, rank 0 is not in the other groups,
    and torch fails at the first checkpoint ("Global rank 0 is not part of group").
    `use_orig_params: true` trains the same model and checkpoints.

    FAIL:

        resources: {gpus_per_node: 2}
        fsdp: {version: 1, sharding_strategy: HYBRID_SHARD, shard_group_size: 1,
               use_orig_params: false}

    PASS:

        resources: {gpus_per_node: 2}
        fsdp: {version: 1, sharding_strategy: HYBRID_SHARD, shard_group_size: 1,
               use_orig_params: true}
    """
    spec, fsdp = ctx.spec, ctx.spec.fsdp
    group = ctx.job.layout.requested_group
    if (fsdp.version == 1 and fsdp.use_orig_params is False
            and fsdp.sharding_strategy in HYBRID_STRATEGIES and spec.world_size > group):
        yield diagnostic("FS904", f"use_orig_params false with {spec.world_size // group} "
                         "hybrid shard groups: the first checkpoint fails",
                         "/fsdp/use_orig_params")
