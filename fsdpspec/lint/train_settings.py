"""FS50x: batches, sequence length, schedule and optimizer settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from fsdpspec.catalog.config_source import resolve_input_path
from fsdpspec.catalog.localfiles import TOKENIZER_LIMITS
from fsdpspec.job.parallel import ParallelDimsError
from fsdpspec.jsonfile import JsonFileError, load_object
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.semantics import BYTE_VOCAB
from fsdpspec.spec.diagnostics import Diagnostic, Severity

# Deliberately wide bounds on the peak learning rate: AdamW recipes sit within 1e-6…3e-3
# and SGD within 1e-4…1, so a value outside these is almost always a misplaced exponent.
_SANE_LR = {"adamw": (1e-7, 1e-2), "sgd": (1e-5, 2.0)}
# Fields each data source reads besides `source`.
_SOURCE_FIELDS = {
    "path": ("text", "jsonl", "dataset"),
    "text_field": ("jsonl", "dataset"),
    "tokenizer": ("corpus", "text", "jsonl", "dataset"),
    "split": ("dataset",),
    "streaming": ("dataset",),
}
# Where a saved Hugging Face tokenizer keeps its chat template.
_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def _nearest_multiples(value: int, step: int) -> list[int]:
    below = value // step * step
    return [n for n in (below, below + step) if n > 0]


@rule("FS501", "batch-not-divisible", Severity.ERROR,
      "global_batch_size is not a multiple of micro_batch_size × data-parallel size",
      "choose a global_batch_size that is a multiple of micro_batch_size × world size")
def batch_not_divisible(ctx: LintContext) -> Iterator[Diagnostic]:
    """Each optimizer step takes `micro_batch_size` sequences on every rank, repeated
    for a whole number of accumulation steps, so `global_batch_size` must be a multiple
    of `micro_batch_size × world size` (every rank is a data-parallel replica under
    FSDP). Anything else cannot be split evenly.

    FAIL:

        resources: {gpus_per_node: 2}
        data: {micro_batch_size: 2, global_batch_size: 6}

    PASS:

        resources: {gpus_per_node: 2}
        data: {micro_batch_size: 2, global_batch_size: 8}
    """
    batch = ctx.job.batch
    try:
        ctx.job.layout.dims.validate()
    except ParallelDimsError:
        return  # no data-parallel size to divide by: FS103/FS104 say why
    if not batch.divides:
        step = batch.per_pass
        choices = " or ".join(map(str, _nearest_multiples(batch.global_size, step)))
        yield diagnostic("FS501", f"global_batch_size {batch.global_size} is not a "
                         f"multiple of micro_batch_size {batch.micro} × "
                         f"{batch.dp_size} ranks = {step}",
                         ctx.first_set("/data/global_batch_size", "/data/micro_batch_size",
                                       "/resources/gpus_per_node"),
                         f"use global_batch_size {choices}")


@rule("FS502", "warmup-covers-run", Severity.ERROR,
      "scheduler warmup_steps ≥ train.max_steps: the run never reaches its learning rate",
      "make warmup a small fraction of max_steps (1-10 %)")
def warmup_covers_run(ctx: LintContext) -> Iterator[Diagnostic]:
    """Warmup ramps the learning rate linearly from 0 to `lr`. When it lasts as long as
    the run, the peak learning rate is never reached and the decay never starts: the
    job trains, but not with the schedule that was written.

    FAIL:

        optimizer: {scheduler: {warmup_steps: 100}}
        train: {max_steps: 100}

    PASS:

        optimizer: {scheduler: {warmup_steps: 10}}
        train: {max_steps: 100}
    """
    warmup, steps = ctx.spec.optimizer.scheduler.warmup_steps, ctx.spec.train.max_steps
    if warmup >= steps:
        yield diagnostic("FS502", f"warmup_steps {warmup} ≥ max_steps {steps}",
                         ctx.first_set("/optimizer/scheduler/warmup_steps", "/train/max_steps"))


@rule("FS503", "seq-len-too-long", Severity.ERROR,
      "data.seq_len exceeds the model's max_position_embeddings",
      "lower data.seq_len to the model's context length")
def seq_len_too_long(ctx: LintContext) -> Iterator[Diagnostic]:
    """Positions beyond `max_position_embeddings` are outside what the model was built
    (and trained) for: rotary embeddings extrapolate badly and learned position tables
    index out of range.

    FAIL:

        model: {preset: tiny-llama}     # max_position_embeddings: 512
        data: {seq_len: 1024}

    PASS:

        model: {preset: tiny-llama}
        data: {seq_len: 512}
    """
    shape = ctx.geometry()
    seq_len = ctx.spec.data.seq_len
    if shape is not None and seq_len > shape.max_position_embeddings:
        yield diagnostic("FS503", f"seq_len {seq_len} exceeds max_position_embeddings "
                         f"{shape.max_position_embeddings}",
                         ctx.first_set("/data/seq_len", "/model"),
                         f"use seq_len ≤ {shape.max_position_embeddings}")


@rule("FS504", "lr-out-of-range", Severity.WARNING,
      "optimizer.lr is outside the range that trains for this optimizer",
      "check the exponent: AdamW usually 1e-6…3e-3, SGD 1e-4…1")
def lr_out_of_range(ctx: LintContext) -> Iterator[Diagnostic]:
    """A peak learning rate far outside the usual range is almost always a typo: too
    high diverges within a few steps (AdamW above 1e-2), too low barely moves the
    weights (below 1e-7).

    FAIL:

        optimizer: {name: adamw, lr: 0.1}

    PASS:

        optimizer: {name: adamw, lr: 3.0e-4}
    """
    optimizer = ctx.spec.optimizer
    low, high = _SANE_LR[optimizer.name]
    if not low <= optimizer.lr <= high:
        yield diagnostic("FS504", f"lr {optimizer.lr:g} is outside {low:g}…{high:g} for "
                         f"{optimizer.name}", "/optimizer/lr")


@rule("FS505", "data-option-unused", Severity.WARNING,
      "a data option that the chosen data.source does not read",
      "remove it, or pick the source that uses it")
def data_option_unused(ctx: LintContext) -> Iterator[Diagnostic]:
    """`data.path` is read by the text, jsonl and dataset sources, `data.text_field` by
    jsonl and dataset, `data.split` and `data.streaming` by dataset only, and
    `data.tokenizer` by every source except synthetic (random token ids).
    Elsewhere they are ignored, which usually means the source is not the intended one.

    FAIL:

        data: {source: synthetic, path: data/train.jsonl}

    PASS:

        data: {source: synthetic}
    """
    data = ctx.spec.data
    for name, sources in _SOURCE_FIELDS.items():
        if ctx.is_set(f"/data/{name}") and data.source not in sources:
            yield diagnostic("FS505", f"data.{name} is ignored with source {data.source}",
                             f"/data/{name}")


def _unused_optimizer_fields(ctx: LintContext) -> Iterator[tuple[str, str]]:
    """(pointer, reason) for optimizer settings the chosen optimizer/schedule ignores."""
    optimizer = ctx.spec.optimizer
    owner = {"betas": "adamw", "eps": "adamw", "momentum": "sgd"}
    for name, wanted in owner.items():
        if ctx.is_set(f"/optimizer/{name}") and optimizer.name != wanted:
            yield f"/optimizer/{name}", f"optimizer.{name} is ignored by {optimizer.name}"
    if ctx.is_set("/optimizer/scheduler/min_lr_ratio") and optimizer.scheduler.name == "constant":
        yield "/optimizer/scheduler/min_lr_ratio", "min_lr_ratio is ignored by a constant schedule"


@rule("FS506", "optimizer-option-unused", Severity.WARNING,
      "an optimizer or schedule option that the chosen one does not read",
      "remove it, or choose the optimizer / schedule that uses it")
def optimizer_option_unused(ctx: LintContext) -> Iterator[Diagnostic]:
    """`betas` and `eps` belong to AdamW, `momentum` to SGD, and `min_lr_ratio` to the
    linear and cosine schedules. Set for another optimizer or schedule they are ignored.

    FAIL:

        optimizer: {name: sgd, lr: 0.01, betas: [0.9, 0.99]}

    PASS:

        optimizer: {name: sgd, lr: 0.01, momentum: 0.9}
    """
    for pointer, message in _unused_optimizer_fields(ctx):
        yield diagnostic("FS506", message, pointer)


@rule("FS507", "byte-vocab-too-small", Severity.ERROR,
      "the byte-level tokenizer emits ids the model's vocabulary does not have",
      f"use a model with vocab_size ≥ {BYTE_VOCAB}, or set data.tokenizer")
def byte_vocab_too_small(ctx: LintContext) -> Iterator[Diagnostic]:
    """Without `data.tokenizer`, text is tokenized as bytes: ids 0-255 and an EOS id
    of 256. A model whose `vocab_size` is below 257 has no embedding row for some of
    them, and the first batch fails with an index error.

    FAIL:

        model:
          factory: "mypkg.models:build"
          geometry: {hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2,
                     num_attention_heads: 4, vocab_size: 128}
        fsdp: {transformer_layer_cls: [Block]}
        data: {source: corpus}

    PASS:

        model:
          factory: "mypkg.models:build"
          geometry: {hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2,
                     num_attention_heads: 4, vocab_size: 128}
        fsdp: {transformer_layer_cls: [Block]}
        data: {source: synthetic}
    """
    data = ctx.spec.data
    shape = ctx.geometry()
    if (shape is not None and data.tokenizer is None and data.source != "synthetic"
            and shape.vocab_size < BYTE_VOCAB):
        yield diagnostic("FS507", f"byte-level tokens need {BYTE_VOCAB} ids; the model's "
                         f"vocab_size is {shape.vocab_size}",
                         ctx.first_set("/data/source", "/model"))


def has_chat_template(directory: Path) -> bool:
    """Whether a saved tokenizer directory holds a chat template (read as data: its
    tokenizer_config.json, or the chat_template.jinja / .json files newer versions write)."""
    if any((directory / name).is_file() for name in _TEMPLATE_FILES):
        return True
    try:
        config = load_object(directory / "tokenizer_config.json", TOKENIZER_LIMITS)
    except JsonFileError:
        return False
    return bool(config.get("chat_template"))


@rule("FS520", "chat-without-template", Severity.ERROR,
      "data.format chat with a tokenizer that has no chat template",
      "set data.tokenizer to a tokenizer whose tokenizer_config.json has a chat_template, "
      "or use format: prompt_completion")
def chat_without_template(ctx: LintContext) -> Iterator[Diagnostic]:
    """Chat records are rendered into text by the tokenizer's chat template, which also
    marks the assistant turns that carry the loss. The byte-level tokenizer (no
    `data.tokenizer`) and a tokenizer saved without a `chat_template` cannot render them,
    and the run would stop at its first record.

    FAIL:

        data: {source: dataset, path: chats.parquet, format: chat}

    PASS:

        data: {source: dataset, path: pairs.parquet, format: prompt_completion}
    """
    data = ctx.spec.data
    if data.format != "chat" or data.source != "dataset":
        return
    if data.tokenizer is None:
        yield diagnostic("FS520", "format chat needs data.tokenizer with a chat template; "
                         "the byte-level tokenizer has none", "/data/format")
        return
    directory = resolve_input_path(data.tokenizer, ctx.base_dir)
    if directory.is_dir() and not has_chat_template(directory):
        yield diagnostic("FS520", f"the tokenizer at {data.tokenizer} has no chat template",
                         "/data/tokenizer")


@rule("FS521", "eval-interval-without-eval", Severity.WARNING,
      "train.eval_interval_steps is set but data.eval names no evaluation set",
      "set data.eval (a split, a path or a held-out fraction), or remove eval_interval_steps")
def eval_interval_without_eval(ctx: LintContext) -> Iterator[Diagnostic]:
    """Evaluation runs on `data.eval`: a separate `split` or `path`, or a held-out
    `fraction` of the training records. Without one, `train.eval_interval_steps` is
    ignored and no `eval_loss` is ever logged.

    FAIL:

        data: {source: dataset, path: chats.parquet}
        train: {eval_interval_steps: 100}

    PASS:

        data: {source: dataset, path: chats.parquet, eval: {fraction: 0.05}}
        train: {eval_interval_steps: 100}
    """
    if ctx.is_set("/train/eval_interval_steps") and not ctx.spec.data.evaluates():
        yield diagnostic("FS521", "eval_interval_steps is set but data.eval names no "
                         "evaluation set: nothing is evaluated", "/train/eval_interval_steps")
