"""FS14x, FS31x, FS54x: LoRA and QLoRA (the `peft` section)."""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.catalog.families import Family, family
from fsdpspec.job.lora import ALL_LINEAR, NF4_BLOCK, NF4_SCALER_BLOCK, quantised_projections
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.semantics import fsdp1_option
from fsdpspec.spec.diagnostics import Diagnostic, Severity

_EMBEDDINGS = ("lm_head", "embed_tokens")


def _family(ctx: LintContext) -> Family | None:
    return family((ctx.model_config or {}).get("model_type"))


@rule("FS140", "lora-target-unknown", Severity.ERROR,
      "a peft.target_modules entry matches no Linear module of the model (or a "
      "peft.target_parameters entry no parameter)",
      "name a projection as the model does (a name or a path suffix such as "
      "self_attn.q_proj), or use all-linear")
def lora_target_unknown(ctx: LintContext) -> Iterator[Diagnostic]:
    """Each entry of `peft.target_modules` is matched as peft matches it: a module whose
    path is the entry or ends in ``.entry`` (so ``q_proj`` and ``self_attn.q_proj``
    both name every layer's query projection); ``all-linear`` (alone) is every Linear
    module but the output head; a string is a regular expression the whole path must
    match (``model.layers.[\\d]+.self_attn.q_proj``). A `peft.target_parameters` entry
    names a parameter the same way (``mlp.experts.gate_up_proj``); peft stops when none
    matches ("no parameter was matched"). peft stops at injection time when no entry matches
    ("Target modules {...} not found in the base model") and silently drops an entry
    that matches nothing beside others; a name that matches only some layers adapts
    less than meant, and one that matches a module that is not Linear (a norm, an
    embedding, a block) is not what the plan counts. The names are transformers' own:
    GPT-NeoX calls its projections query_key_value, dense, dense_h_to_4h and
    dense_4h_to_h.

    FAIL:

        model: {preset: llama3-8b}
        peft: {target_modules: [q_proj, query_key_value]}

    PASS:

        model: {preset: llama3-8b}
        peft: {target_modules: [self_attn.q_proj, v_proj]}
    """
    peft, adapters = ctx.spec.peft, ctx.job.adapters
    if peft is None or adapters is None:
        return
    matched, model = adapters.matched, _model_name(ctx)
    for index in _indexes(peft.target_parameters, matched.unmatched_parameters):
        yield diagnostic("FS140", f"peft.target_parameters {peft.target_parameters[index]!r} "
                         f"matches no parameter of {model}", f"/peft/target_parameters/{index}")
    if isinstance(peft.target_modules, str):  # a regular expression, full-matched
        why = [f"matches no module of {model}"] if matched.unmatched_targets else []
        why += [f"matches {path} ({cls}), not a Linear module" for _, path, cls in
                matched.not_linear[:1]]
        for text in why:
            yield diagnostic("FS140", f"peft.target_modules {peft.target_modules!r} (a regular "
                             f"expression) {text}", "/peft/target_modules")
        return
    names = list(peft.target_modules)
    if ALL_LINEAR in names and len(names) > 1:
        yield diagnostic("FS140", f"peft.target_modules {ALL_LINEAR!r} stands alone (peft "
                         "reads it only as the whole list)",
                         f"/peft/target_modules/{names.index(ALL_LINEAR)}")
        return
    why = {t: f"matches no module of {model}" for t in matched.unmatched_targets}
    why |= {t: f"matches only some decoder layers of {model}" for t in matched.some_layers}
    why |= {t: f"matches {path} ({cls}), not a Linear module"
            for t, path, cls in matched.not_linear}
    for index, name in enumerate(names):
        if name in why and name not in _expert_names(ctx):
            yield diagnostic("FS140", f"peft.target_modules {name!r} {why[name]}",
                             f"/peft/target_modules/{index}")


def _indexes(names: list[str], picked: tuple[str, ...]) -> list[int]:
    return [index for index, name in enumerate(names) if name in picked]


def _model_name(ctx: LintContext) -> str:
    found = _family(ctx)
    g = ctx.geometry()
    return f"{found.prefix} models" if found else f"model_type {g.family if g else None!r}"


def _expert_names(ctx: LintContext) -> tuple[str, ...]:
    """The target names peft maps onto the experts: the family's, or what the model
    built on the meta device answered."""
    found, g = _family(ctx), ctx.geometry()
    if found:
        return found.moe.peft_expert_names if found.moe else ()
    return g.peft_expert_names if g else ()


def _converted_targets(ctx: LintContext, experts: tuple[str, ...]) -> list[tuple[str, str]]:
    """(the target as written, its pointer) of each `target_modules` entry peft turns
    into expert adapters: an expert name or all-linear; for a regular expression, one
    whose matches peft resolves to an expert name."""
    peft = ctx.spec.peft
    assert peft is not None
    if not experts:
        return []
    if isinstance(peft.target_modules, str):
        adapters = ctx.job.adapters
        resolved = [n for n in (adapters.matched.resolved_targets if adapters else ())
                    if n in experts]
        return [(f"{peft.target_modules!r} (a regular expression that matches "
                 f"{', '.join(resolved)})", "/peft/target_modules")] if resolved else []
    return [(repr(name), f"/peft/target_modules/{index}")
            for index, name in enumerate(peft.target_modules)
            if name in experts or name == ALL_LINEAR]


@rule("FS146", "lora-experts", Severity.ERROR,
      "LoRA on a Mixture of Experts' experts in a form peft cannot build, or builds "
      "otherwise than planned",
      "name the experts' stacked tensors in peft.target_parameters "
      "(mlp.experts.gate_up_proj, mlp.experts.down_proj), with peft.dropout 0")
def lora_experts(ctx: LintContext) -> Iterator[Diagnostic]:
    """Under transformers 5 a Mixture of Experts keeps its experts in stacked tensors,
    not Linear modules. peft adapts them as `target_parameters` (its ParamWrapper: one
    rank-r pair per expert), which `peft.target_parameters` names, planned and trained.
    Three other roads are refused by name:

    - peft's ParamWrapper cannot take dropout (it stops: "does not work with
      lora_dropout != 0"), nor a parameter that is neither 2-D nor 3-D (a norm, a bias
      vector);
    - peft (0.21) also maps transformers 4's names onto the experts: on Mixtral ``w1``,
      ``w2``, ``w3`` and ``gate``, on Qwen3-MoE and OLMoE ``gate_proj``, ``up_proj``,
      ``down_proj`` and ``gate``, and ``all-linear`` takes them all; it then adapts the
      experts and the router with ranks of its own choosing (the fused gate/up pair at
      twice the rank), which the plan does not count. A model without a family
      (DeepSeek-V3, GLM-4-MoE, ...) is asked on the meta device: the names are the ones
      peft's own table maps for its model_type;
    - `target_parameters` on a model without a registered family is not planned.

    FAIL:

        model: {preset: tiny-qwen3-moe}
        peft: {target_modules: [q_proj, gate_proj, up_proj, down_proj]}

    PASS:

        model: {preset: tiny-qwen3-moe}
        peft:
          target_modules: [q_proj, k_proj, v_proj, o_proj]
          target_parameters: [mlp.experts.gate_up_proj, mlp.experts.down_proj]
    """
    peft, experts = ctx.spec.peft, _expert_names(ctx)
    if peft is None:
        return
    for written, pointer in _converted_targets(ctx, experts):
        yield diagnostic("FS146", f"peft.target_modules {written}: peft converts it into "
                         f"adapters on the experts and router of {_model_name(ctx)} at "
                         "ranks of its own, which fsdpspec does not plan", pointer)
    if not peft.target_parameters:
        return
    g = ctx.geometry()
    if g is not None and g.introspected:
        yield diagnostic("FS146", f"peft.target_parameters on {_model_name(ctx)}, which has no "
                         "registered family, is not planned", "/peft/target_parameters")
    if peft.dropout:
        yield diagnostic("FS146", f"peft.dropout {peft.dropout:g} with peft.target_parameters: "
                         "peft's ParamWrapper does not work with lora_dropout != 0",
                         "/peft/dropout")
    adapters = ctx.job.adapters
    flat = [path for path, shape in (*adapters.matched.layer_params,
                                     *adapters.matched.root_params)
            if len(shape) not in (2, 3)] if adapters else []
    for index, name in enumerate(peft.target_parameters):
        hit = [p for p in flat if p == name or p.endswith(f".{name}")]
        if hit:
            yield diagnostic("FS146", f"peft.target_parameters {name!r} names {hit[0]}, which "
                             "is neither 2-D nor 3-D (peft adapts a matrix or stacked "
                             "matrices)", f"/peft/target_parameters/{index}")


@rule("FS141", "lora-targets-unknown", Severity.ERROR,
      "peft.target_modules is empty and the model has no default targets",
      "list the modules to adapt in peft.target_modules")
def lora_targets_unknown(ctx: LintContext) -> Iterator[Diagnostic]:
    """With `peft.target_modules` empty, the adapters go on the family's attention and
    MLP projections. A `factory` model, or a `model_type` outside the registry, has no
    such list: the modules must be named.

    FAIL:

        model: {factory: "mypkg.models:build"}
        fsdp: {transformer_layer_cls: [Block]}
        peft: {method: lora}

    PASS:

        model: {factory: "mypkg.models:build"}
        fsdp: {transformer_layer_cls: [Block]}
        peft: {method: lora, target_modules: [proj]}
    """
    peft = ctx.spec.peft
    if peft is not None and not ctx.job.lora_targets and not peft.target_parameters:
        yield diagnostic("FS141", "peft.target_modules is empty and the model's family has "
                         "no default targets", "/peft")


@rule("FS142", "lora-flat-params", Severity.ERROR,
      "FSDP1 with use_orig_params: false cannot shard a LoRA's frozen base",
      "set fsdp.use_orig_params: true (or leave it null), or use fsdp.version: 2")
def lora_flat_params(ctx: LintContext) -> Iterator[Diagnostic]:
    """FSDP1 flattens each unit into one FlatParameter; without `use_orig_params` a
    FlatParameter needs every parameter in it to agree on requires_grad, and a LoRA
    unit holds frozen base weights beside trainable adapters: "FlatParameter requires
    uniform requires_grad". FSDP2 shards each parameter on its own and has no such limit.

    FAIL:

        fsdp: {version: 1, use_orig_params: false}
        peft: {method: lora}

    PASS:

        fsdp: {version: 1, use_orig_params: true}
        peft: {method: lora}
    """
    fsdp = ctx.spec.fsdp
    if ctx.spec.peft is not None and fsdp.version == 1 and not fsdp1_option(fsdp,
                                                                           "use_orig_params"):
        yield diagnostic("FS142", "peft with fsdp.version 1 needs use_orig_params: true "
                         "(FlatParameter requires uniform requires_grad)",
                         "/fsdp/use_orig_params")


@rule("FS143", "modules-to-save-tied", Severity.ERROR,
      "peft.modules_to_save names a tied embedding",
      "leave the embeddings frozen, or use a model with untied embeddings")
def modules_to_save_tied(ctx: LintContext) -> Iterator[Diagnostic]:
    """With tied embeddings, `lm_head` and `embed_tokens` are one parameter. A module in
    `modules_to_save` is trained as a separate copy, so training one of them unties the
    pair: the saved adapter then holds a head the base model's tie overwrites when it is
    loaded, and FSDP must keep both holders of the shared weight in one unit.

    FAIL:

        model: {preset: gemma2-9b, attention: eager}
        peft: {modules_to_save: [lm_head]}

    PASS:

        model: {preset: llama3-8b}
        peft: {modules_to_save: [lm_head]}
    """
    peft, config = ctx.spec.peft, ctx.model_config or {}
    found = _family(ctx)
    tied = config.get("tie_word_embeddings", found.defaults.get("tie_word_embeddings")
                      if found else False)
    if peft is None or not tied:
        return
    for index, name in enumerate(peft.modules_to_save):
        if name in _EMBEDDINGS:
            yield diagnostic("FS143", f"peft.modules_to_save {name!r} is a tied embedding of "
                             "this model", f"/peft/modules_to_save/{index}")


@rule("FS144", "modules-to-save-unknown", Severity.ERROR,
      "a peft.modules_to_save entry matches no module of the model",
      "name a module as the model does: peft saves every module whose path ends in the name")
def modules_to_save_unknown(ctx: LintContext) -> Iterator[Diagnostic]:
    """`modules_to_save` names modules trained in full beside the adapters. peft copies
    every module whose path ends in the entry (a plain suffix: ``norm`` takes every
    layer's ``input_layernorm`` and ``post_attention_layernorm`` and the final norm,
    ``o_proj`` every layer's output projection), and a name that matches nothing is
    dropped without a word: nothing is trained or saved for it. GPT-NeoX calls its
    input embedding ``embed_in``, not ``embed_tokens``.

    FAIL:

        model: {preset: pythia-1.4b}
        peft: {modules_to_save: [embed_tokens]}

    PASS:

        model: {preset: pythia-1.4b}
        peft: {modules_to_save: [embed_in]}
    """
    peft, adapters = ctx.spec.peft, ctx.job.adapters
    if peft is None or adapters is None:
        return
    found = _family(ctx)
    for index, name in enumerate(peft.modules_to_save):
        if name in adapters.matched.unmatched_saves:
            renamed = found.module_names.get(f"model.{name}") if found else None
            hint = f" (it calls it {renamed.rsplit('.', 1)[-1]})" if renamed else ""
            yield diagnostic("FS144", f"peft.modules_to_save {name!r} matches no module of "
                             f"{_model_name(ctx)}{hint}", f"/peft/modules_to_save/{index}")


@rule("FS145", "lora-target-also-saved", Severity.ERROR,
      "a module is both a LoRA target and in peft.modules_to_save",
      "adapt it (target_modules) or train it in full (modules_to_save), not both")
def lora_target_also_saved(ctx: LintContext) -> Iterator[Diagnostic]:
    """A module in `modules_to_save` is replaced by a trainable copy, so it is no longer
    the module a target names: peft then finds nothing to adapt for that name ("No
    modules were targeted for adaptation") when it is the only target, and drops the
    adapter silently when it is not.

    FAIL:

        peft: {target_modules: [lm_head], modules_to_save: [lm_head]}

    PASS:

        peft: {target_modules: [q_proj, v_proj], modules_to_save: [lm_head]}
    """
    peft, adapters = ctx.spec.peft, ctx.job.adapters
    if peft is None or adapters is None:
        return
    both = {save for _, save in adapters.matched.saved_targets}
    for index, name in enumerate(peft.modules_to_save):
        if name in both:
            yield diagnostic("FS145", f"peft.modules_to_save {name!r} is also a LoRA target",
                             f"/peft/modules_to_save/{index}")


@rule("FS310", "qlora-storage-dtype", Severity.ERROR,
      "QLoRA's 4-bit storage dtype differs from the unit's other parameters",
      "set peft.quantization.storage_dtype to fsdp.mixed_precision.param_dtype")
def qlora_storage_dtype(ctx: LintContext) -> Iterator[Diagnostic]:
    """FSDP gathers a unit as one buffer of one dtype. bitsandbytes packs 4-bit weights
    into bytes of `storage_dtype` (its quant_storage); when that is not the dtype of the
    unit's other parameters (norms, adapters cast to the compute dtype), FSDP1 stops
    with "Must flatten tensors with uniform dtype" and FSDP2 gathers the unit in pieces.

    FAIL:

        model: {preset: llama3-8b}
        fsdp: {mixed_precision: bf16}
        peft: {method: qlora, quantization: {storage_dtype: float32}}

    PASS:

        model: {preset: llama3-8b}
        fsdp: {mixed_precision: bf16}
        peft: {method: qlora, quantization: {storage_dtype: bfloat16}}
    """
    peft = ctx.spec.peft
    param_dtype = ctx.spec.fsdp.mixed_precision.param_dtype
    if peft is not None and peft.method == "qlora" and (
            peft.quantization.storage_dtype != param_dtype):
        yield diagnostic("FS310", f"peft.quantization.storage_dtype "
                         f"{peft.quantization.storage_dtype} is not the units' dtype "
                         f"{param_dtype}", ctx.first_set("/peft/quantization/storage_dtype",
                                                         "/peft/quantization", "/peft/method"))


@rule("FS311", "qlora-compute-dtype", Severity.ERROR,
      "QLoRA computes in bfloat16 on a device without bfloat16",
      "set peft.quantization.compute_dtype: float16")
def qlora_compute_dtype(ctx: LintContext) -> Iterator[Diagnostic]:
    """The 4-bit weights are dequantised to `compute_dtype` for every matmul; a GPU
    without bfloat16 arithmetic (V100, T4) cannot run the default.

    FAIL:

        resources: {accelerator: V100}
        peft: {method: qlora, quantization: {compute_dtype: bfloat16}}

    PASS:

        model: {preset: llama3-8b}
        resources: {accelerator: V100}
        fsdp: {mixed_precision: fp16}
        peft: {method: qlora, quantization: {compute_dtype: float16, storage_dtype: float16}}
    """
    peft = ctx.spec.peft
    if (peft is not None and peft.method == "qlora"
            and peft.quantization.compute_dtype == "bfloat16"
            and not ctx.spec.device().supports_bf16):
        yield diagnostic("FS311", f"{ctx.spec.device().name} has no bfloat16 for QLoRA's "
                         "compute dtype", ctx.first_set("/peft/quantization/compute_dtype",
                                                        "/peft/method"))


@rule("FS312", "qlora-not-trained", Severity.ERROR,
      "QLoRA under FSDP1, which cannot shard 4-bit weights",
      "use fsdp.version: 2 (QLoRA's NF4 weights shard under fully_shard), or plan only")
def qlora_not_trained(ctx: LintContext) -> Iterator[Diagnostic]:
    """The engine trains QLoRA under FSDP2 only: each frozen base projection becomes a
    torchao NF4 tensor, which shards and all-gathers its packed bytes through FSDP2's
    ``fsdp_pre_all_gather`` / ``fsdp_post_all_gather`` hooks (as torchtune's QLoRA
    recipes do). FSDP1 flattens a unit into one FlatParameter of one dtype and has no such
    hooks, so a QLoRA spec under `fsdp.version: 1` would validate and then fail: it is
    refused before launch. `fsdpspec plan` still sizes it.

    FAIL:

        fsdp: {version: 1, use_orig_params: true}
        peft: {method: qlora}

    PASS:

        model: {preset: llama3-8b}
        fsdp: {version: 2, mixed_precision: bf16}
        peft: {method: qlora}
    """
    if (ctx.spec.peft is not None and ctx.spec.peft.method == "qlora"
            and ctx.spec.fsdp.version == 1):
        yield diagnostic("FS312", "peft.method qlora is not trained under fsdp.version 1 "
                         "(FSDP1 cannot shard 4-bit weights)",
                         ctx.first_set("/fsdp/version", "/peft/method"))


@rule("FS314", "qlora-nf4-only", Severity.ERROR,
      "peft.quantization asks for a 4-bit format the engine does not build",
      "set quant_type: nf4, double_quant: true and compute_dtype to "
      "fsdp.mixed_precision.param_dtype (the defaults under bf16)")
def qlora_nf4_only(ctx: LintContext) -> Iterator[Diagnostic]:
    """The engine quantises QLoRA's base with torchao's NF4Tensor, the 4-bit type that
    shards under FSDP2. It is NF4 only (no FP4), always double-quantised (8-bit block
    absmaxes, one scale per 256 blocks: bitsandbytes' `bnb_4bit_use_double_quant`), and
    dequantised for each matmul to the dtype of its input, which FSDP2 casts to
    `fsdp.mixed_precision.param_dtype`. bitsandbytes' other options would be dropped
    silently, so each is refused at its line.

    FAIL:

        fsdp: {mixed_precision: bf16}
        peft: {method: qlora, quantization: {quant_type: fp4, double_quant: false}}

    PASS:

        model: {preset: llama3-8b}
        fsdp: {mixed_precision: bf16}
        peft: {method: qlora, quantization: {quant_type: nf4, compute_dtype: bfloat16}}
    """
    peft = ctx.spec.peft
    if peft is None or peft.method != "qlora":
        return
    q, param_dtype = peft.quantization, ctx.spec.fsdp.mixed_precision.param_dtype
    if q.quant_type != "nf4":
        yield diagnostic("FS314", f"peft.quantization.quant_type {q.quant_type} is not built "
                         "by the engine (torchao NF4 only)", "/peft/quantization/quant_type")
    if not q.double_quant:
        yield diagnostic("FS314", "peft.quantization.double_quant false is not built by the "
                         "engine (torchao's NF4 always quantises its scales)",
                         "/peft/quantization/double_quant")
    if q.compute_dtype != param_dtype:
        yield diagnostic("FS314", f"peft.quantization.compute_dtype {q.compute_dtype} is not "
                         f"the dtype NF4 dequantises to here ({param_dtype}, "
                         "fsdp.mixed_precision.param_dtype)",
                         ctx.first_set("/peft/quantization/compute_dtype", "/peft/method"))


@rule("FS315", "qlora-shard-blocks", Severity.ERROR,
      "a 4-bit weight does not split into whole quantisation blocks per rank",
      "use a shard group that divides the projections' rows and blocks, or peft.method: lora")
def qlora_shard_blocks(ctx: LintContext) -> Iterator[Diagnostic]:
    """FSDP2 shards an NF4 weight by rows, and each rank's rows must hold whole scale
    blocks: NF4 keeps one 8-bit absmax per 64 weights and one scale per 256 absmaxes,
    so a projection of out × in splits over s ranks only when s divides out and
    out · in / 16384. Real models pass (4096 × 4096 is 1024 such blocks); small
    models and odd shard groups do not, and torchao stops at `fully_shard`
    ("quantization_factor.numel() not divisible by 2").

    FAIL:

        model: {preset: tiny-llama}
        resources: {gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        peft: {method: qlora}

    PASS:

        model: {preset: llama3-8b}
        resources: {gpus_per_node: 2}
        fsdp: {mixed_precision: bf16}
        peft: {method: qlora}
    """
    peft, geometry = ctx.spec.peft, ctx.geometry()
    if peft is None or peft.method != "qlora" or geometry is None:
        return
    shards = ctx.job.layout.shard_size
    per_scale = NF4_BLOCK * NF4_SCALER_BLOCK
    for name, (out, into) in quantised_projections(geometry):
        if out % shards or (out * into) % (per_scale * shards):
            yield diagnostic("FS315", f"{name} ({out} × {into}) does not split into whole "
                             f"blocks of {per_scale} weights over {shards} shard(s)",
                             "/peft/method")
            return


@rule("FS316", "qlora-experts", Severity.ERROR,
      "QLoRA of a Mixture of Experts, whose stacked experts the engine does not quantise",
      "use peft.method: lora (its experts frozen in the compute dtype)")
def qlora_experts(ctx: LintContext) -> Iterator[Diagnostic]:
    """QLoRA stores the frozen base in 4 bits so that it fits. The engine quantises each
    Linear projection into torchao's NF4Tensor, which FSDP2 shards; a Mixture of Experts
    keeps most of its weights in stacked 3-D expert tensors, which are not Linear
    modules and which NF4Tensor does not shard as experts, so they would stay in the
    compute dtype: four times what a QLoRA plan of the model means. What is missing is
    4-bit stacked experts (bitsandbytes quantises Linear modules only as well); refused
    by name rather than trained as a LoRA under another name.

    FAIL:

        model: {preset: tiny-qwen3-moe}
        fsdp: {mixed_precision: bf16}
        peft: {method: qlora}

    PASS:

        model: {preset: tiny-qwen3-moe}
        fsdp: {mixed_precision: bf16}
        peft: {method: lora}
    """
    peft, g = ctx.spec.peft, ctx.geometry()
    if (peft is not None and peft.method == "qlora" and g is not None
            and (g.experts is not None or _expert_names(ctx))):
        yield diagnostic("FS316", f"peft.method qlora on {_model_name(ctx)}, a Mixture of "
                         "Experts: the engine quantises Linear projections only, and the "
                         "stacked experts have no 4-bit form here (not built)",
                         ctx.first_set("/peft/method", "/peft"))


@rule("FS313", "quantization-without-qlora", Severity.WARNING,
      "peft.quantization is set but peft.method is lora",
      "set peft.method: qlora, or remove peft.quantization")
def quantization_without_qlora(ctx: LintContext) -> Iterator[Diagnostic]:
    """`peft.quantization` describes QLoRA's 4-bit base; under `method: lora` the base is
    kept in the compute dtype and the block is ignored.

    FAIL:

        peft: {method: lora, quantization: {quant_type: fp4}}

    PASS:

        peft: {method: lora}
    """
    peft = ctx.spec.peft
    if peft is not None and peft.method == "lora" and ctx.is_set("/peft/quantization"):
        yield diagnostic("FS313", "peft.quantization is ignored under method lora",
                         "/peft/quantization")


@rule("FS540", "lora-rank-too-large", Severity.ERROR,
      "peft.r is not below a target projection's width",
      "lower peft.r (8–64 is usual)")
def lora_rank_too_large(ctx: LintContext) -> Iterator[Diagnostic]:
    """An adapter of rank r adds r·(in + out) parameters to a projection of in·out; at
    r ≥ min(in, out) it is no longer low-rank: it trains more than the projection
    itself and merges into a full-rank update.

    FAIL:

        model: {preset: tiny-llama}
        peft: {r: 4096}

    PASS:

        model: {preset: tiny-llama}
        peft: {r: 8}
    """
    peft, geometry, adapters = ctx.spec.peft, ctx.geometry(), ctx.job.adapters
    if peft is None or adapters is None or geometry is None or geometry.introspected:
        return
    narrowest = min((min(shape) for _, shape in adapters.linears), default=None)
    if narrowest is not None and peft.r >= narrowest:
        yield diagnostic("FS540", f"peft.r {peft.r} is not below the narrowest target's "
                         f"width {narrowest}", "/peft/r")


@rule("FS541", "lora-scale", Severity.WARNING,
      "peft.alpha / peft.r is far from 1–2",
      "set alpha to r or 2r")
def lora_scale(ctx: LintContext) -> Iterator[Diagnostic]:
    """The adapter's output is scaled by alpha / r. The usual recipes use 1 or 2; a scale
    above 16 or below 1/16 multiplies or divides the effective learning rate of the
    adapters by that much, which usually diverges or does not train.

    FAIL:

        peft: {r: 8, alpha: 512}

    PASS:

        peft: {r: 8, alpha: 16}
    """
    peft = ctx.spec.peft
    if peft is not None and not 1 / 16 <= peft.alpha / peft.r <= 16:
        yield diagnostic("FS541", f"peft.alpha / peft.r = {peft.alpha / peft.r:g} scales the "
                         "adapters' updates far from the usual 1–2",
                         ctx.first_set("/peft/alpha", "/peft/r"))
