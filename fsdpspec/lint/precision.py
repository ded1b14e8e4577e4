"""FS30x: mixed precision — dtypes, loss scaling, and what the accelerator computes in."""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.semantics import DTYPE_BYTES
from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.spec.v1 import JobSpec

_PRECISION = "/fsdp/mixed_precision"


def _bf16_fields(spec: JobSpec) -> list[str]:
    """The precision fields that compute or communicate in bfloat16 (buffers only count
    under FSDP1: FSDP2 leaves buffers as they are)."""
    names = ["param_dtype", "reduce_dtype"] + ["buffer_dtype"] * (spec.fsdp.version == 1)
    precision = spec.fsdp.mixed_precision
    return [n for n in names if getattr(precision, n) == "bfloat16"]


@rule("FS301", "reduce-narrower-than-param", Severity.WARNING,
      "gradients are reduced in a narrower dtype than parameters compute in",
      "set reduce_dtype to float32 (or at least param_dtype)")
def reduce_narrower_than_param(ctx: LintContext) -> Iterator[Diagnostic]:
    """The gradient reduce-scatter sums one contribution per rank. Reducing in fewer
    bits than the parameters compute in throws away precision exactly where many
    small values are added up; the usual recipe computes in bf16 and reduces in fp32.

    FAIL:

        fsdp:
          mixed_precision: {param_dtype: float32, reduce_dtype: bfloat16}

    PASS:

        fsdp:
          mixed_precision: {param_dtype: bfloat16, reduce_dtype: float32}
    """
    precision = ctx.spec.fsdp.mixed_precision
    if DTYPE_BYTES[precision.reduce_dtype] < DTYPE_BYTES[precision.param_dtype]:
        yield diagnostic("FS301", f"reduce_dtype {precision.reduce_dtype} is narrower than "
                         f"param_dtype {precision.param_dtype}", f"{_PRECISION}/reduce_dtype")


@rule("FS302", "fp16-without-loss-scaling", Severity.ERROR,
      "float16 compute without loss scaling",
      "set train.loss_scaling: dynamic, or use bfloat16")
def fp16_without_loss_scaling(ctx: LintContext) -> Iterator[Diagnostic]:
    """float16 has a narrow exponent range: without loss scaling, small gradients
    underflow to zero and the model silently stops learning.

    FAIL:

        fsdp: {mixed_precision: fp16}
        train: {loss_scaling: none}

    PASS:

        fsdp: {mixed_precision: fp16}
        train: {loss_scaling: dynamic}
    """
    if (ctx.spec.fsdp.mixed_precision.param_dtype == "float16"
            and ctx.spec.train.loss_scaling == "none"):
        yield diagnostic("FS302", "param_dtype float16 with loss_scaling none: small "
                         "gradients underflow to zero", "/train/loss_scaling")


@rule("FS303", "bf16-unsupported", Severity.ERROR,
      "bfloat16 on an accelerator without bfloat16 support",
      "use float16 with dynamic loss scaling (or float32) on this accelerator")
def bf16_unsupported(ctx: LintContext) -> Iterator[Diagnostic]:
    """Pre-Ampere GPUs (V100, T4) have no bfloat16 arithmetic: bf16 kernels either
    fail or fall back to slow emulation. Use float16 with loss scaling there.

    FAIL:

        resources: {accelerator: V100}
        fsdp: {mixed_precision: bf16}

    PASS:

        resources: {accelerator: V100}
        fsdp: {mixed_precision: fp16}
    """
    fields = _bf16_fields(ctx.spec)
    if fields and not ctx.spec.device().supports_bf16:
        yield diagnostic("FS303", f"{ctx.spec.device().name} has no bfloat16 support "
                         f"({', '.join(fields)})", f"{_PRECISION}/{fields[0]}")


@rule("FS304", "loss-scaling-unused", Severity.INFO,
      "train.loss_scaling is set but nothing computes in float16",
      "remove train.loss_scaling; it only applies to float16")
def loss_scaling_unused(ctx: LintContext) -> Iterator[Diagnostic]:
    """Loss scaling protects float16 gradients from underflow; bfloat16 and float32
    have float32's exponent range and need none, so the setting is ignored.

    FAIL:

        fsdp: {mixed_precision: bf16}
        train: {loss_scaling: dynamic}

    PASS:

        fsdp: {mixed_precision: fp16}
        train: {loss_scaling: dynamic}
    """
    spec = ctx.spec
    if (ctx.is_set("/train/loss_scaling") and spec.train.loss_scaling == "dynamic"
            and spec.fsdp.mixed_precision.param_dtype != "float16"):
        yield diagnostic("FS304", "loss_scaling dynamic is ignored: param_dtype is "
                         f"{spec.fsdp.mixed_precision.param_dtype}", "/train/loss_scaling")


@rule("FS305", "fp32-on-bf16-gpu", Severity.INFO,
      "float32 compute on a GPU with fast bfloat16",
      "use mixed_precision: bf16 (bf16 compute, fp32 gradient reduction)")
def fp32_on_bf16_gpu(ctx: LintContext) -> Iterator[Diagnostic]:
    """Ampere and newer GPUs run bfloat16 matmuls several times faster than float32,
    and bf16 activations take half the memory. `mixed_precision: bf16` keeps the
    gradient reduction and optimizer state in float32.

    FAIL:

        resources: {accelerator: A100-80GB}
        fsdp: {mixed_precision: fp32}

    PASS:

        resources: {accelerator: A100-80GB}
        fsdp: {mixed_precision: bf16}
    """
    spec = ctx.spec
    if (spec.device().is_gpu and spec.device().supports_bf16
            and spec.fsdp.mixed_precision.param_dtype == "float32"):
        yield diagnostic("FS305", f"param_dtype float32 on {spec.device().name}, which "
                         "computes in bfloat16 several times faster", f"{_PRECISION}/param_dtype")


@rule("FS306", "fp16-where-bf16", Severity.INFO,
      "float16 compute on an accelerator that supports bfloat16",
      "use mixed_precision: bf16: same speed, no loss scaling needed")
def fp16_where_bf16(ctx: LintContext) -> Iterator[Diagnostic]:
    """bfloat16 is as fast as float16 on Ampere and newer GPUs and has float32's range,
    so it needs no loss scaling and cannot overflow where float16 does.

    FAIL:

        resources: {accelerator: A100-80GB}
        fsdp: {mixed_precision: fp16}

    PASS:

        resources: {accelerator: V100}
        fsdp: {mixed_precision: fp16}
    """
    spec = ctx.spec
    if (spec.device().is_gpu and spec.device().supports_bf16
            and spec.fsdp.mixed_precision.param_dtype == "float16"):
        yield diagnostic("FS306", f"param_dtype float16 on {spec.device().name}, which "
                         "supports bfloat16", f"{_PRECISION}/param_dtype")
