"""FS11x: auto-wrap policy — which modules become FSDP units."""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.catalog.families import family
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity


def _architecture(ctx: LintContext) -> str:
    """How the model is called in messages: its architecture, else its model_type."""
    config = ctx.model_config or {}
    names = config.get("architectures") or [config.get("model_type", "the model")]
    return str(names[0])


def _millions(count: int) -> str:
    return f"{count / 1e6:,.1f}M"


@rule("FS110", "layer-cls-unknown", Severity.ERROR,
      "transformer policy without layer classes, and none can be inferred",
      "list the model's block class in fsdp.transformer_layer_cls, or use the size policy")
def layer_cls_unknown(ctx: LintContext) -> Iterator[Diagnostic]:
    """The transformer policy makes each transformer block an FSDP unit. For a preset or
    a `hf_config` model the block class is known; for a `factory` model it must be
    listed, or nothing but the root is wrapped and the whole model is all-gathered at
    once ("Could not find the transformer layer class to wrap" in accelerate).

    FAIL:

        model: {factory: "mypkg.models:build"}
        fsdp: {auto_wrap_policy: transformer}

    PASS:

        model: {factory: "mypkg.models:build"}
        fsdp: {auto_wrap_policy: transformer, transformer_layer_cls: [Block]}
    """
    fsdp = ctx.spec.fsdp
    config = ctx.model_config or {}
    # A transformers model names its blocks itself (`_no_split_modules`): only a factory
    # model has no class to infer (an hf_config that cannot be read is FS407's).
    if (fsdp.auto_wrap_policy == "transformer" and not fsdp.transformer_layer_cls
            and ctx.spec.model.factory is not None
            and config.get("model_type", "custom") == "custom"):
        yield diagnostic("FS110", "auto_wrap_policy transformer needs transformer_layer_cls "
                         "for a factory model", "/fsdp/auto_wrap_policy")


@rule("FS111", "layer-cls-not-in-model", Severity.ERROR,
      "a transformer_layer_cls entry is not a layer of the chosen model",
      "use the model's decoder layer class")
def layer_cls_not_in_model(ctx: LintContext) -> Iterator[Diagnostic]:
    """Each entry of `fsdp.transformer_layer_cls` must be a module class the model
    builds: a class it does not build wraps nothing, and when no entry matches, the job
    stops at wrap time. The model family is read from the preset or the local
    `config.json` (`model_type`), without importing transformers, so a class from
    another family — `LlamaDecoderLayer` on a Qwen2 model — is caught before the job
    starts, with the family's decoder layer suggested.

    FAIL:

        model: {preset: tiny-qwen2}
        fsdp: {transformer_layer_cls: [LlamaDecoderLayer]}

    PASS:

        model: {preset: tiny-qwen2}
        fsdp: {transformer_layer_cls: [Qwen2DecoderLayer]}
    """
    found = family((ctx.model_config or {}).get("model_type"))
    if found is None:
        return
    expected, known = found.layer_class, found.module_classes()
    for index, name in enumerate(ctx.spec.fsdp.transformer_layer_cls):
        if name not in known:
            yield diagnostic("FS111", f"transformer_layer_cls {name!r} is not a layer of "
                             f"{_architecture(ctx)}", f"/fsdp/transformer_layer_cls/{index}",
                             f"use {expected} (inferred from the model)")


@rule("FS112", "layer-cls-unused", Severity.WARNING,
      "transformer_layer_cls is set but the wrap policy is not transformer",
      "remove transformer_layer_cls, or use auto_wrap_policy: transformer")
def layer_cls_unused(ctx: LintContext) -> Iterator[Diagnostic]:
    """Only the transformer policy reads `fsdp.transformer_layer_cls`; with the size
    policy or none, the list is ignored.

    FAIL:

        fsdp:
          auto_wrap_policy: size
          min_num_params: 10000
          transformer_layer_cls: [LlamaDecoderLayer]

    PASS:

        fsdp: {auto_wrap_policy: transformer, transformer_layer_cls: [LlamaDecoderLayer]}
    """
    fsdp = ctx.spec.fsdp
    if fsdp.transformer_layer_cls and fsdp.auto_wrap_policy != "transformer":
        yield diagnostic("FS112", f"transformer_layer_cls is ignored with auto_wrap_policy "
                         f"{fsdp.auto_wrap_policy}", "/fsdp/transformer_layer_cls")


@rule("FS113", "size-policy-too-large", Severity.WARNING,
      "size policy min_num_params exceeds every layer: layers are not wrapped one by one",
      "lower min_num_params to at most one layer's size, or use the transformer policy")
def size_policy_too_large(ctx: LintContext) -> Iterator[Diagnostic]:
    """The size policy wraps, bottom-up, each module whose not-yet-wrapped parameters
    reach `min_num_params`. When one decoder layer holds fewer, no layer becomes a unit:
    layers pile up into their parent, and whole stacks of layers are all-gathered at
    once, which costs the memory that sharding was meant to save.

    FAIL:

        model: {preset: tiny-llama}      # 36,992 parameters per layer
        fsdp: {auto_wrap_policy: size, min_num_params: 100000}

    PASS:

        model: {preset: tiny-llama}
        fsdp: {auto_wrap_policy: size, min_num_params: 30000}
    """
    fsdp = ctx.spec.fsdp
    shape = ctx.geometry()
    if fsdp.auto_wrap_policy != "size" or shape is None or fsdp.min_num_params == 0:
        return
    if fsdp.min_num_params > shape.layer_params:
        yield diagnostic("FS113", f"min_num_params {fsdp.min_num_params:,} exceeds one "
                         f"decoder layer ({_millions(shape.layer_params)} parameters): no "
                         "layer is wrapped as its own unit",
                         ctx.first_set("/fsdp/min_num_params", "/fsdp/auto_wrap_policy"),
                         f"use min_num_params ≤ {shape.layer_params:,}")


@rule("FS114", "size-policy-zero", Severity.WARNING,
      "size policy with min_num_params 0 makes every module a unit",
      "set min_num_params to about one layer's parameter count")
def size_policy_zero(ctx: LintContext) -> Iterator[Diagnostic]:
    """With `min_num_params: 0` every module with parameters — each Linear, each norm —
    becomes an FSDP unit, so a step issues thousands of small all-gathers and
    reduce-scatters instead of one per layer.

    FAIL:

        fsdp: {auto_wrap_policy: size, min_num_params: 0}

    PASS:

        fsdp: {auto_wrap_policy: size, min_num_params: 10000}
    """
    fsdp = ctx.spec.fsdp
    if fsdp.auto_wrap_policy == "size" and fsdp.min_num_params == 0:
        yield diagnostic("FS114", "min_num_params 0 wraps every module with parameters as "
                         "its own unit", "/fsdp/min_num_params")


@rule("FS115", "min-num-params-unused", Severity.WARNING,
      "min_num_params is set but the wrap policy is not size",
      "remove min_num_params, or use auto_wrap_policy: size")
def min_num_params_unused(ctx: LintContext) -> Iterator[Diagnostic]:
    """Only the size policy reads `fsdp.min_num_params`.

    FAIL:

        fsdp: {auto_wrap_policy: transformer, min_num_params: 50000000}

    PASS:

        fsdp: {auto_wrap_policy: size, min_num_params: 10000}
    """
    fsdp = ctx.spec.fsdp
    if ctx.is_set("/fsdp/min_num_params") and fsdp.auto_wrap_policy != "size":
        yield diagnostic("FS115", f"min_num_params is ignored with auto_wrap_policy "
                         f"{fsdp.auto_wrap_policy}", "/fsdp/min_num_params")


@rule("FS116", "no-wrap-policy", Severity.WARNING,
      "auto_wrap_policy none on several ranks: the whole model is one unit",
      "use auto_wrap_policy: transformer")
def no_wrap_policy(ctx: LintContext) -> Iterator[Diagnostic]:
    """With no wrap policy only the root is an FSDP unit: every forward all-gathers the
    entire model at once, so peak memory holds the full unsharded parameters and no
    communication overlaps with compute.

    FAIL:

        resources: {gpus_per_node: 2}
        fsdp: {auto_wrap_policy: none}

    PASS:

        resources: {gpus_per_node: 2}
        fsdp: {auto_wrap_policy: transformer}
    """
    spec = ctx.spec
    if spec.fsdp.auto_wrap_policy == "none" and spec.world_size > 1:
        yield diagnostic("FS116", f"auto_wrap_policy none: the whole model is gathered on "
                         f"each of {spec.world_size} ranks", "/fsdp/auto_wrap_policy")
