"""FS407, FS408, FS508: the local files a job reads — present, and matching the model.

These read the files (as data, never with torch), so a spec written on a laptop for
paths that exist only on a cluster fails them: ignore them there (`--ignore FS407` or
`lint: {ignore: [FS407]}`); `fsdpspec run` checks the paths again before it starts.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from fsdpspec.catalog.config_source import hub_input, resolve_input_path
from fsdpspec.catalog.localfiles import LocalFileError, safetensors_shapes, tokenizer_vocab_size
from fsdpspec.job.geometry import Geometry
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity


def _path_problem(path: Path, want_dir: bool) -> str | None:
    """What is wrong with ``path`` as an input, from one stat (Path.exists() answers
    False for a symbolic-link loop too, which is not a missing file)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a loop of symbolic links (ELOOP); fix the link"
        return f"cannot be read ({exc.strerror})"  # a component that is a file, EACCES…
    if want_dir and not stat.S_ISDIR(mode):
        return "is not a directory"
    return None


@rule("FS407", "input-path-missing", Severity.ERROR,
      "an input path (model.hf_config, model.weights, data.path, data.tokenizer) does not "
      "exist or is not a directory",
      "fix the path (relative to the spec file), or for a spec written for another machine "
      "ignore FS407 (`fsdpspec run` checks it again)")
def input_path_missing(ctx: LintContext) -> Iterator[Diagnostic]:
    """Every local input is checked where the spec is validated, so a typo fails here
    rather than on every rank after the model is built. `model.weights` and
    `data.tokenizer` are directories; `data.path` is a file or a directory of files;
    `model.hf_config` is a config.json or its directory. Paths are relative to the
    spec file. A spec written for a cluster can say `lint: {ignore: [FS407]}`.

    FAIL:

        data: {source: jsonl, path: data/train.jsonl}

    PASS:

        data: {source: jsonl, path: data/train.jsonl}
        lint: {ignore: [FS407]}
    """
    for pointer, value, want_dir, hub in ctx.spec.input_paths():
        if hub and hub_input(value, ctx.base_dir, hub):
            continue  # a Hub id: FS030 / FS031 say whether the cache holds it
        path = resolve_input_path(value, ctx.base_dir)
        problem = _path_problem(path, want_dir)
        if problem:
            field = pointer.strip("/").replace("/", ".")
            yield diagnostic("FS407", f"{field}: {path} {problem}", pointer)


_LAYER_KEY = re.compile(r"model\.layers\.(0|[1-9]\d{0,9})\.(.+)")


class _Expected:
    """The model's tensor names and shapes, answered by lookup rather than listed: a
    config may ask for 2^31 layers, the files hold what they hold."""

    def __init__(self, shape: Geometry) -> None:
        self.root = dict(shape.root_tensors())
        self.layer = dict(shape.layer_tensors())
        self.num_layers = shape.num_layers
        self.count = len(self.root) + self.num_layers * len(self.layer)

    def shape_of(self, name: str) -> tuple[int, ...] | None:
        if name in self.root:
            return self.root[name]
        found = _LAYER_KEY.fullmatch(name)
        if found and int(found[1]) < self.num_layers:
            return self.layer.get(found[2])
        return None

    def first_missing(self, found: dict[str, tuple[int, ...]]) -> str:
        """The first of the model's names not in ``found`` (there is one: the caller
        counted fewer matches than the model has; the search stops within
        len(found) + 1 layers)."""
        missing = next((n for n in self.root if n not in found), None)
        index = 0
        while missing is None:
            missing = next((f"model.layers.{index}.{n}" for n in self.layer
                            if f"model.layers.{index}.{n}" not in found), None)
            index += 1
        return missing


def _weights_mismatch(found: dict[str, tuple[int, ...]], shape: Geometry) -> str | None:
    """What about the files does not fit the model (None when they fit); work bounded by
    the files' names, whatever the model's layer count."""
    expected = _Expected(shape)
    if shape.tie_word_embeddings:  # a tied lm_head may be saved or left out
        found = {k: v for k, v in found.items() if k != "lm_head.weight"}
    wanted = {name: expected.shape_of(name) for name in found}
    wrong = sorted(k for k, dims in wanted.items() if dims is not None and dims != found[k])
    unexpected = sorted(k for k, dims in wanted.items() if dims is None)
    if wrong:
        name = wrong[0]
        return (f"{len(wrong)} tensor(s) have another shape, e.g. {name} is "
                f"{list(found[name])} in the files but {list(wanted[name])} for the model")
    matched = len(found) - len(unexpected)
    if matched < expected.count:
        return (f"{expected.count - matched} of the model's tensors are missing, e.g. "
                f"{expected.first_missing(found)}")
    if unexpected:
        return f"{len(unexpected)} tensor(s) are not the model's, e.g. {unexpected[0]}"
    return None


@rule("FS408", "weights-do-not-match-model", Severity.ERROR,
      "model.weights holds tensors whose names or shapes are not the model's",
      "point model.weights at the checkpoint of this model (or fix the model config)")
def weights_do_not_match_model(ctx: LintContext) -> Iterator[Diagnostic]:
    """The safetensors headers in `model.weights` (only the headers are read: a few
    kilobytes, whatever the size of the weights) must name exactly the model's
    parameters with the model's shapes. Weights of another size or family otherwise
    fail when every rank loads them. `.bin` files cannot be read without torch and are
    checked when the run loads them.

    FAIL:

        model: {preset: tiny-llama, weights: models/weights-llama-small}

    PASS:

        model: {hf_config: models/llama-small, weights: models/weights-llama-small}
    """
    shape, weights = ctx.geometry(), ctx.spec.model.weights
    if weights is None or shape is None or shape.family == "custom":
        return
    path = resolve_input_path(weights, ctx.base_dir)
    if not path.is_dir():
        return  # FS407's finding
    try:
        found = safetensors_shapes(path)
    except LocalFileError as exc:
        yield diagnostic("FS408", f"model.weights: {exc}", "/model/weights")
        return
    problem = _weights_mismatch(found, shape) if found is not None else None
    if problem:
        count = sum(math.prod(s) for s in (found or {}).values())
        yield diagnostic("FS408", f"model.weights ({count:,} parameters) do not match the "
                         f"model ({shape.total_params:,}): {problem}", "/model/weights")


@rule("FS508", "tokenizer-vocab-too-large", Severity.ERROR,
      "data.tokenizer emits token ids the model's vocabulary does not have",
      "use the tokenizer that belongs to the model, or a model with a larger vocab_size")
def tokenizer_vocab_too_large(ctx: LintContext) -> Iterator[Diagnostic]:
    """Every token id the tokenizer emits needs a row in the model's embedding. A
    tokenizer whose vocabulary (added tokens included) is larger than the model's
    `vocab_size` sends ids the embedding does not have, and training fails at the first
    batch that holds one. Read from the tokenizer's tokenizer.json (or vocab.json).

    FAIL:

        model: {preset: tiny-llama}
        data: {source: corpus, tokenizer: models/tokenizer-400}

    PASS:

        model: {hf_config: models/llama}
        data: {source: corpus, tokenizer: models/tokenizer-400}
    """
    data, shape = ctx.spec.data, ctx.geometry()
    if data.tokenizer is None or data.source == "synthetic" or shape is None:
        return
    path = resolve_input_path(data.tokenizer, ctx.base_dir)
    if not path.is_dir():
        return  # FS407's finding
    try:
        size = tokenizer_vocab_size(path)
    except LocalFileError as exc:
        yield diagnostic("FS508", f"data.tokenizer: {exc}", "/data/tokenizer")
        return
    if size is not None and size > shape.vocab_size:
        yield diagnostic("FS508", f"the tokenizer has {size} token ids but the model's "
                         f"vocab_size is {shape.vocab_size}", "/data/tokenizer")
