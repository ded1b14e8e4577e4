"""FS56x: preference tuning (`train.objective: dpo`): its data, its reference, and what
the engine does not train under it."""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity


@rule("FS560", "objective-data-mismatch", Severity.ERROR,
      "train.objective dpo without preference data, or preference data without dpo",
      "set data.format: preference with train.objective: dpo (data.source: dataset)")
def objective_data_mismatch(ctx: LintContext) -> Iterator[Diagnostic]:
    """DPO compares the policy on a chosen and a rejected completion of one prompt, so
    it trains on `data.format: preference` records (`prompt`, `chosen`, `rejected`).
    Preference records under the supervised objective have no single target to learn.

    FAIL:

        data: {source: dataset, path: chats.parquet, format: chat}
        train: {objective: dpo}

    PASS:

        data: {source: dataset, path: pairs.jsonl, format: preference}
        train: {objective: dpo}
    """
    spec = ctx.spec
    dpo, preference = spec.train.objective == "dpo", spec.data.format == "preference"
    if dpo and not preference:
        yield diagnostic("FS560", f"train.objective dpo needs data.format preference, not "
                         f"{spec.data.format}", ctx.first_set("/data/format", "/train/objective"))
    elif preference and not dpo:
        yield diagnostic("FS560", "data.format preference is trained by train.objective "
                         "dpo; the objective is sft", "/data/format",
                         "set train.objective: dpo")


@rule("FS561", "dpo-adapter-reference-needs-peft", Severity.ERROR,
      "train.dpo.reference adapter without a peft section",
      "add a peft section (LoRA), or use reference: model or precomputed")
def adapter_reference_needs_peft(ctx: LintContext) -> Iterator[Diagnostic]:
    """The `adapter` reference is the policy with its LoRA adapters switched off: the
    frozen base. A full fine-tune has no adapters to switch off, and no frozen base.

    FAIL:

        data: {source: dataset, path: pairs.jsonl, format: preference}
        train: {objective: dpo, dpo: {reference: adapter}}

    PASS:

        data: {source: dataset, path: pairs.jsonl, format: preference}
        train: {objective: dpo, dpo: {reference: adapter}}
        peft: {method: lora}
    """
    spec = ctx.spec
    if spec.train.objective == "dpo" and spec.train.dpo.reference == "adapter" and not spec.peft:
        yield diagnostic("FS561", "reference adapter is the policy with its adapters "
                         "disabled; this job trains every parameter (no peft section)",
                         "/train/dpo/reference")


@rule("FS562", "dpo-precomputed-stream", Severity.ERROR,
      "train.dpo.reference precomputed with streaming data",
      "set data.streaming: false, or use reference: model (or adapter with LoRA)")
def precomputed_stream(ctx: LintContext) -> Iterator[Diagnostic]:
    """Precomputed reference log-probs are written once per record before training and
    looked up by the record's place in the data; a stream has no fixed records to key
    them by, and reading it twice would hold it in memory anyway.

    FAIL:

        data: {source: dataset, path: pairs.jsonl, format: preference, streaming: true}
        train: {objective: dpo, dpo: {reference: precomputed}}

    PASS:

        data: {source: dataset, path: pairs.jsonl, format: preference}
        train: {objective: dpo, dpo: {reference: precomputed}}
    """
    spec = ctx.spec
    if (spec.train.objective == "dpo" and spec.train.dpo.reference == "precomputed"
            and spec.data.streaming):
        yield diagnostic("FS562", "precomputed reference log-probs need the whole data "
                         "set; data.streaming reads it once, lazily",
                         ctx.first_set("/data/streaming", "/train/dpo/reference"))


def _unsupported(ctx: LintContext) -> Iterator[tuple[str, str]]:
    """(pointer, what) for each setting the engine does not train DPO with."""
    spec, dims = ctx.spec, ctx.job.layout.dims
    if dims.tp_enabled:
        yield "/parallelism/tensor_parallel", "tensor parallelism"
    if dims.cp_enabled:
        yield "/parallelism/context_parallel", "context parallelism"
    if ctx.job.layout.ddp:
        yield "/fsdp/sharding_strategy", "NO_SHARD in full precision (DDP)"
    if spec.train.loss_chunks > 1:
        yield "/train/loss_chunks", "train.loss_chunks (chunked cross entropy)"
    if ctx.is_set("/data/packing") and spec.data.packing:
        yield "/data/packing", "packed preference pairs"
    shape = ctx.geometry()
    if shape is not None and shape.experts is not None:
        yield "/model", "a Mixture-of-Experts model (its load-balancing loss)"


@rule("FS563", "dpo-unsupported", Severity.ERROR,
      "train.objective dpo with a setting the engine does not train DPO with",
      "remove the setting, or train with train.objective: sft")
def dpo_unsupported(ctx: LintContext) -> Iterator[Diagnostic]:
    """The engine trains DPO on FSDP1 and FSDP2 (sharded or hybrid), with activation
    checkpointing and with LoRA / QLoRA. It does not with tensor or context
    parallelism, as DDP (NO_SHARD in full precision), with `train.loss_chunks`, with
    packed pairs (each pair is one padded sequence of `seq_len`), or on a
    Mixture-of-Experts model.

    FAIL:

        resources: {gpus_per_node: 2}
        parallelism: {tensor_parallel: 2}
        data: {source: dataset, path: pairs.jsonl, format: preference}
        train: {objective: dpo}

    PASS:

        resources: {gpus_per_node: 2}
        data: {source: dataset, path: pairs.jsonl, format: preference}
        train: {objective: dpo}
    """
    if ctx.spec.train.objective != "dpo":
        return
    for pointer, what in _unsupported(ctx):
        yield diagnostic("FS563", f"train.objective dpo is not trained with {what}", pointer)


@rule("FS564", "dpo-option-unused", Severity.WARNING,
      "a train.dpo setting that the objective or the chosen loss does not read",
      "remove it, or set train.objective: dpo (label_smoothing: the sigmoid loss)")
def dpo_option_unused(ctx: LintContext) -> Iterator[Diagnostic]:
    """`train.dpo` is read only under `train.objective: dpo`, and `label_smoothing`
    only by the sigmoid loss (IPO has no label noise term). Elsewhere the setting is
    ignored, which usually means the objective or the loss is not the intended one.

    FAIL:

        train: {dpo: {beta: 0.2}}

    PASS:

        data: {source: dataset, path: pairs.jsonl, format: preference}
        train: {objective: dpo, dpo: {beta: 0.2}}
    """
    spec = ctx.spec
    if spec.train.objective != "dpo":
        for name in ("beta", "loss", "label_smoothing", "reference"):
            if ctx.is_set(f"/train/dpo/{name}"):
                yield diagnostic("FS564", f"train.dpo.{name} is ignored: train.objective "
                                 "is sft", f"/train/dpo/{name}")
    elif spec.train.dpo.loss == "ipo" and spec.train.dpo.label_smoothing:
        yield diagnostic("FS564", "train.dpo.label_smoothing is ignored by the ipo loss",
                         "/train/dpo/label_smoothing")
