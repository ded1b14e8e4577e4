"""FS32x: float8 training — the accelerator, the shapes `_scaled_mm` takes, and what
float8 does not combine with in this release."""

from __future__ import annotations

import re
from collections.abc import Iterator

from fsdpspec.job.float8 import SCALED_MM_MULTIPLE
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity

_FLOAT8 = "/float8"


@rule("FS320", "float8-no-fp8-tensor-cores", Severity.ERROR,
      "float8 training on a GPU without FP8 tensor cores (A100, A10G, V100, T4)",
      "remove the float8 section, or train on Hopper, Ada, Blackwell or MI300 GPUs")
def float8_no_fp8_tensor_cores(ctx: LintContext) -> Iterator[Diagnostic]:
    """float8 matmuls need FP8 tensor cores: Ampere (A100, A10G), Volta and Turing have
    none, and torch's `_scaled_mm` refuses them. A custom accelerator states its
    `fp8_tflops`. On `accelerator: cpu` float8 runs on torch's CPU kernels (for tests).

    FAIL:

        resources: {accelerator: A100-80GB}
        fsdp: {mixed_precision: bf16}
        float8: {recipe: tensorwise}

    PASS:

        resources: {accelerator: H100-80GB}
        fsdp: {mixed_precision: bf16}
        float8: {recipe: tensorwise}
    """
    device = ctx.spec.device()
    if ctx.spec.float8 is not None and device.is_gpu and not device.fp8_tflops:
        yield diagnostic("FS320", f"{device.name} has no FP8 tensor cores", _FLOAT8)


@rule("FS321", "float8-scaled-mm-shape", Severity.ERROR,
      "a float8 matmul's dimensions are not multiples of 16 (torch._scaled_mm)",
      "add the module to float8.exclude, or make micro_batch_size × seq_len a multiple of 16")
def float8_scaled_mm_shape(ctx: LintContext) -> Iterator[Diagnostic]:
    """`torch._scaled_mm` takes operands whose dimensions are multiples of 16: each
    converted Linear's input and output widths, and the tokens of a micro-batch (the
    inner dimension of the weight gradient's matmul).

    FAIL:

        model: {preset: tiny-llama}
        data: {seq_len: 30, micro_batch_size: 1}
        float8: {recipe: tensorwise}

    PASS:

        model: {preset: tiny-llama}
        data: {seq_len: 32, micro_batch_size: 1}
        float8: {recipe: tensorwise}
    """
    float8 = ctx.job.float8
    if float8 is None:
        return
    for path, shape in float8.misfits():
        yield diagnostic("FS321", f"float8 converts {path} of weight {list(shape)}: not "
                         f"multiples of {SCALED_MM_MULTIPLE}", f"{_FLOAT8}/exclude")
    batch = ctx.job.batch
    if (batch.micro * batch.seq) % SCALED_MM_MULTIPLE:
        yield diagnostic("FS321", f"a micro-batch holds {batch.micro} × {batch.seq} tokens, "
                         f"not a multiple of {SCALED_MM_MULTIPLE}",
                         ctx.first_set("/data/seq_len", "/data/micro_batch_size"))


@rule("FS322", "float8-with-peft", Severity.ERROR,
      "float8 training with a LoRA or QLoRA adapter",
      "remove the float8 section or the peft section")
def float8_with_peft(ctx: LintContext) -> Iterator[Diagnostic]:
    """peft wraps the Linear modules float8 converts, and QLoRA's 4-bit base weights
    are no high-precision weights to cast: this release does not combine them.

    FAIL:

        peft: {method: lora, r: 8}
        float8: {recipe: tensorwise}

    PASS:

        float8: {recipe: tensorwise}
    """
    spec = ctx.spec
    if spec.float8 is not None and spec.peft is not None:
        yield diagnostic("FS322", f"float8 with peft.method {spec.peft.method} is not in this "
                         "release", _FLOAT8)


@rule("FS323", "float8-with-tensor-parallel", Severity.ERROR,
      "float8 training with tensor_parallel > 1",
      "set parallelism.tensor_parallel: 1, or remove the float8 section")
def float8_with_tensor_parallel(ctx: LintContext) -> Iterator[Diagnostic]:
    """torchao's float8 tensor-parallel styles are not wired into this release's
    tensor-parallel plan.

    FAIL:

        parallelism: {tensor_parallel: 2}
        float8: {recipe: tensorwise}

    PASS:

        parallelism: {tensor_parallel: 1}
        float8: {recipe: tensorwise}
    """
    spec = ctx.spec
    if spec.float8 is not None and ctx.job.layout.dims.tp > 1:
        yield diagnostic("FS323", f"float8 with tensor_parallel {ctx.job.layout.dims.tp} is not "
                         "in this release", "/parallelism/tensor_parallel")


@rule("FS324", "float8-all-gather-unavailable", Severity.ERROR,
      "float8.fsdp_all_gather: true where FSDP2 cannot gather in float8",
      "set float8.fsdp_all_gather: null (on where it can run) or false")
def float8_all_gather_unavailable(ctx: LintContext) -> Iterator[Diagnostic]:
    """torchao gathers weights in float8 under FSDP2 with the tensorwise recipe (one
    scale per tensor, all-reduced before the cast), and only where FSDP gathers
    sharded weights at all.

    FAIL:

        float8: {recipe: rowwise, fsdp_all_gather: true}

    PASS:

        float8: {recipe: rowwise}
    """
    section, lay = ctx.spec.float8, ctx.job.layout
    if section is None or section.fsdp_all_gather is not True:
        return
    why = ("the rowwise recipe" if section.recipe == "rowwise"
           else "FSDP1" if lay.fsdp_version == 1
           else f"{lay.strategy}, which gathers nothing" if lay.ddp or lay.shard_size == 1
           else None)
    if why is not None:
        yield diagnostic("FS324", f"float8.fsdp_all_gather: true cannot run under {why}",
                         f"{_FLOAT8}/fsdp_all_gather")


@rule("FS325", "float8-fsdp1", Severity.ERROR,
      "float8 training under FSDP1",
      "set fsdp.version: 2")
def float8_fsdp1(ctx: LintContext) -> Iterator[Diagnostic]:
    """This release converts to float8 for FSDP2 (torchtitan's path); FSDP1's flat
    parameters are not tested with torchao's Float8Linear.

    FAIL:

        fsdp: {version: 1}
        float8: {recipe: tensorwise}

    PASS:

        fsdp: {version: 2}
        float8: {recipe: tensorwise}
    """
    if ctx.spec.float8 is not None and ctx.job.layout.fsdp_version == 1:
        yield diagnostic("FS325", "float8 under FSDP1 is not in this release",
                         ctx.first_set("/fsdp/version", _FLOAT8))


# Characters of a regular expression that no module path holds: a name with one is
# matched literally, so it names nothing (torchtitan's filter_fqns are no regex either).
_REGEX = re.compile(r"[*^$?+\[\](){}|\\]")


@rule("FS326", "float8-exclude-unknown", Severity.ERROR,
      "a float8.exclude entry matches no Linear module of the model",
      "name a module as the model does (a name or a path suffix such as mlp.down_proj); "
      "names are literal, not regular expressions")
def float8_exclude_unknown(ctx: LintContext) -> Iterator[Diagnostic]:
    """Each entry of `float8.exclude` is matched as `peft.target_modules` is (FS140): a
    module whose path is the entry or ends in ``.entry``. An entry that matches no module
    keeps every Linear it meant to keep in high precision converted, with no word from
    torchao; so does one that names a block (`mlp`), as float8 converts each Linear by
    its own path; one that looks like a regular expression is matched literally, and so
    names nothing.

    FAIL:

        model: {preset: tiny-llama}
        data: {seq_len: 64}
        float8: {exclude: [lm_head, 'layers\\.0\\..*']}

    PASS:

        model: {preset: tiny-llama}
        data: {seq_len: 64}
        float8: {exclude: [lm_head, layers.0.mlp.down_proj]}
    """
    float8 = ctx.job.float8
    if float8 is None:
        return
    why = dict(float8.unmatched_exclude)
    for index, name in enumerate(float8.section.exclude):
        if name in why:
            regex = (" (it is matched literally, as a module's path or its end, not as a "
                     "regular expression)") if _REGEX.search(name) else ""
            yield diagnostic("FS326", f"float8.exclude {name!r} {why[name]} of "
                             f"{_model_name(ctx)}{regex}", f"{_FLOAT8}/exclude/{index}")


@rule("FS327", "float8-converts-nothing", Severity.ERROR,
      "float8 converts no Linear module of the model",
      "exclude fewer modules (float8.exclude), or remove the float8 section")
def float8_converts_nothing(ctx: LintContext) -> Iterator[Diagnostic]:
    """A float8 section whose `exclude` (with `skip_small`) leaves no Linear module to
    convert trains in high precision throughout, while the spec, the plan and the run
    record say float8.

    FAIL:

        model: {preset: tiny-llama}
        data: {seq_len: 64}
        float8: {exclude: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj,
                           lm_head]}

    PASS:

        model: {preset: tiny-llama}
        data: {seq_len: 64}
        float8: {exclude: [lm_head]}
    """
    float8 = ctx.job.float8
    if float8 is None or ctx.geometry() is None or float8.linears:
        return
    yield diagnostic("FS327", f"float8 converts no Linear module of {_model_name(ctx)}: "
                     "float8.exclude and skip_small leave none", ctx.first_set(
                         f"{_FLOAT8}/exclude", f"{_FLOAT8}/skip_small", _FLOAT8))


def _model_name(ctx: LintContext) -> str:
    g = ctx.geometry()
    return ctx.spec.model.preset or (f"model_type {g.family!r}" if g else "the model")
