"""The model families fsdpspec plans and trains analytically: one registry.

Each entry says what a transformers ``model_type`` builds, in the terms the planner, the
lint rules and the engine need: the class names (the decoder layer is the FSDP unit),
the defaults of its config class for the keys that change geometry, where it puts
biases and norms, and its Mixture-of-Experts shape. Facts were read off the transformers
implementation of each family (``AutoModelForCausalLM.from_config`` on the meta
device); tests/catalog/test_families.py checks every count against it.

A bias rule is ``True``/``False``, or the name of the config key that switches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Bias = bool | str

# Norms per decoder layer, by placement.
NORMS = {
    "pre": ("input_layernorm", "post_attention_layernorm"),
    # OLMo 2 normalises each sub-block's output, not its input.
    "post": ("post_attention_layernorm", "post_feedforward_layernorm"),
    # Gemma 2/3: both.
    "sandwich": ("input_layernorm", "post_attention_layernorm",
                 "pre_feedforward_layernorm", "post_feedforward_layernorm"),
}

# The planner's names of a dense MLP's projections, by `Family.mlp` (the attention's
# live under ``self_attn``, these under ``mlp``).
MLP_PROJECTIONS = {"gated": ("gate_proj", "up_proj", "down_proj"),
                   "gated_fused": ("gate_up_proj", "down_proj"),
                   "plain": ("up_proj", "down_proj")}
_MLP_PROJECTIONS = {name for names in MLP_PROJECTIONS.values() for name in names}


def attention_picked(*, supports_sdpa: bool) -> str:
    """The attention implementation transformers builds when none is asked for
    (`PreTrainedModel.get_correct_attn_implementation`): sdpa where the model class
    supports it, else eager; never flash attention, which is asked for by name."""
    return "sdpa" if supports_sdpa else "eager"


# The decoder layer's module that holds a Mixture of Experts' stacked expert tensors, as
# every registered family's config class names it in transformers' `base_model_ep_plan`
# (``layers.*.mlp.experts: ep_dispatch_experts``; tests/catalog/test_families.py).
EXPERTS_MODULE = "mlp.experts"


@dataclass(frozen=True)
class Moe:
    """A Mixture-of-Experts block: where its config keeps the expert shape, and what it
    builds and saves."""

    experts_key: str
    # Expert MLP width: its own key, or the dense intermediate_size.
    width_key: str = "intermediate_size"
    router_bias: bool = False
    expert_bias: bool = False
    # The router module's attribute name (``mlp.gate`` or ``mlp.router``).
    router: str = "gate"
    # Expert-width tensors each routed token saves for backward: the gate_up output
    # (two), the activation and the gated product; gpt-oss's clamped gate saves more.
    width_saves: int = 4
    # The router is an nn.Linear subclass (peft's all-linear adapts it).
    router_linear: bool = False
    # The stacked experts are stored input-major, (E, H, 2I) and (E, I, H) (gpt-oss),
    # not (E, 2I, H) and (E, H, I): their dim 1, where FSDP may shard them, differs.
    input_major: bool = False
    # transformers 4's names of the experts' projections and of the router, which peft
    # (0.21, transformers_weight_conversion) maps onto the stacked expert tensors and the
    # router weight: a target naming one, or all-linear, adapts the experts.
    peft_expert_names: tuple[str, ...] = ()


# How tensor parallelism splits a module (torchtitan's `parallelize_llama`, by the
# transformers module names of `Family.tensor_parallel_plan`):
TP_STYLES = {
    "colwise": "weight split by output features (q/k/v heads, gate/up width); output "
               "stays split",
    "rowwise": "weight split by input features (o, down); output reduce-scattered over "
               "the sequence",
    "sequence_parallel": "norm run on each rank's shard of the sequence; weight replicated",
    "head_norm": "per-head q/k norm run on each rank's heads; weight replicated",
    "gather_input": "input all-gathered from the sequence shards (attention, MLP)",
    "vocab_embedding": "embedding split by vocabulary; output reduce-scattered over the "
                       "sequence",
    "loss_parallel": "output projection split by vocabulary; the cross entropy runs on "
                     "the split logits",
}
# Sizes the degree must divide, by `Geometry` attribute: colwise splits the heads, the
# key/value heads and the MLP width, the embedding and output split the vocabulary.
TP_DIVIDES = {"num_heads": "attention heads", "num_kv_heads": "key/value heads",
              "intermediate_size": "intermediate_size", "vocab_size": "vocab_size"}


@dataclass(frozen=True)
class TensorParallelPlan:
    """How the engine splits one family over the tensor-parallel ranks: a `TP_STYLES`
    name by module path of the built ``ForCausalLM`` (``*``: every layer index), or why
    it cannot split the family at all (``refused``; then ``styles`` is empty).

    Tied embeddings: the vocabulary-parallel embedding and the loss-parallel output both
    split the shared [vocab, hidden] weight by rows, so they stay one tensor."""

    styles: dict[str, str]
    refused: str | None = None
    # The dimension of the heads in the tensor a ``head_norm`` reads.
    heads_dim: int = 2

    def style_of(self, path: str) -> str | None:
        """The style of module ``path`` (a layer's index matches ``*``)."""
        parts = path.split(".")
        key = ".".join("*" if p.isdigit() else p for p in parts)
        return self.styles.get(key)


@dataclass(frozen=True)
class Family:
    """What one transformers ``model_type`` builds."""

    model_type: str
    # Class-name prefix: Llama → LlamaDecoderLayer, LlamaForCausalLM, LlamaAttention…
    prefix: str
    defaults: dict[str, Any]
    decoder_layer: str = ""
    qkv_bias: Bias = False
    o_bias: Bias = False
    mlp_bias: Bias = False
    # "gated" (gate, up, down), "gated_fused" (gate_up, down), "plain" (up, down).
    mlp: str = "gated"
    fused_qkv: bool = False
    norm: str = "rms"  # or "layernorm" (weight and bias)
    norm_placement: str = "pre"
    # Attention and MLP read the same input (GPT-NeoX's use_parallel_residual).
    parallel_residual: Bias = False
    # Grouped-query attention: False when the family ignores num_key_value_heads.
    gqa: bool = True
    # Rotary embedding rebuilds q head-major (concatenating its rotated part), so the
    # attention output is copied once more for the output projection.
    head_major_query: bool = False
    # q/k norms: None, "head" (over head_dim) or "width" (over the whole projection).
    qk_norm: str | None = None
    # Where a "head" q/k norm finds the heads: [batch, seq, heads, head_dim] (2), or
    # after the heads moved ahead of the sequence (Gemma 3: 1).
    qk_norm_heads_dim: int = 2
    # RMSNorm applies its weight in fp32 (Gemma, OLMo 2, gpt-oss), so it saves fp32
    # values only.
    fp32_norm: bool = False
    softcap: bool = False
    # How `sliding_window` is honoured: "never", "always", "flag" (use_sliding_window),
    # or "layer_types" (only the layers so marked).
    window: str = "never"
    attention_sinks: bool = False
    # Config keys of the dropout on each sublayer's output (attention and MLP: two a
    # layer) and on the embeddings (None: the family has none there); each keeps a bool
    # mask for backward when its rate is not 0.
    hidden_dropout: tuple[str, str | None] | None = None
    # transformers builds the family with eager attention only (its model class's
    # `_supports_sdpa` is False); `model.attention: auto` resolves to eager for it.
    eager_only: bool = False
    lm_head_bias: Bias = False
    moe: Moe | None = None
    # Module classes with parameters beyond the usual ones (lint FS111 accepts them).
    extra_modules: tuple[str, ...] = ()
    # Module paths transformers spells otherwise than the planner's Llama-style names
    # (the planner's → the family's), and modules it registers ahead of their siblings:
    # the FSDP units are named as the built model names them.
    module_names: dict[str, str] = field(default_factory=dict)
    modules_first: tuple[str, ...] = ()
    # The config class's ``attribute_map`` (alias → the attribute it stores): a config
    # re-saved by transformers writes the stored name, the original may use the alias.
    aliases: dict[str, str] = field(default_factory=dict)
    # Built-in presets of this family, the first being the one an import picks.
    presets: tuple[str, ...] = ()
    # Why tensor parallelism cannot split the family's layers, where the registry's
    # other facts do not say it (`tensor_parallel_plan`).
    tp_refused: str | None = None
    # What peft adapts when a LoraConfig names no target_modules (its
    # TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING; none: peft refuses such a
    # config): TRL's DPO script hands peft none unless --lora_target_modules says.
    peft_default_targets: tuple[str, ...] = ()

    @property
    def auto_attention(self) -> str:
        """What `model.attention: auto` builds for the family (`attention_picked`)."""
        return attention_picked(supports_sdpa=not self.eager_only)

    def projection_name(self, planned: str) -> str:
        """transformers' module name of the projection the planner calls ``planned``
        (q_proj, qkv_proj, o_proj, gate_proj, up_proj, gate_up_proj, down_proj), read
        from `module_names`: GPT-NeoX's query_key_value, StarCoder2's c_fc…"""
        parent = "mlp" if planned in _MLP_PROJECTIONS else "self_attn"
        path = f"{parent}.{planned}"
        return self.module_names.get(path, path).rsplit(".", 1)[-1]

    @property
    def projections(self) -> tuple[str, ...]:
        """The planner's names of the ``nn.Linear`` projections in one decoder layer:
        attention, then the dense MLP (a Mixture of Experts keeps its experts in stacked
        tensors, which are not Linear modules)."""
        attention = ("qkv_proj",) if self.fused_qkv else ("q_proj", "k_proj", "v_proj")
        return (*attention, "o_proj", *(() if self.moe else MLP_PROJECTIONS[self.mlp]))

    @property
    def lora_targets(self) -> tuple[str, ...]:
        """Modules a LoRA adapts by default (`peft.target_modules` left empty): every
        attention and MLP projection, by transformers' names."""
        return tuple(self.projection_name(p) for p in self.projections)

    def module_path(self, planned: str) -> str:
        """transformers' path of a module the planner names Llama-style (model.norm →
        gpt_neox.final_layer_norm)."""
        return self.module_names.get(planned, planned)

    @property
    def tensor_parallel_plan(self) -> TensorParallelPlan:
        """How tensor parallelism splits this family (`TensorParallelPlan`)."""
        refused = self.tp_refused
        if self.moe:
            refused = ("its experts are stacked tensors, not Linear layers a column or row "
                       "split applies to (expert parallelism is not built)")
        elif self.qk_norm == "width":
            refused = ("its q/k norms normalise over every head at once: a rank holding "
                       "some of the heads cannot compute them")
        if refused:
            return TensorParallelPlan({}, refused)
        layer = f"{self.module_path('model')}.layers.*"
        attention, mlp = self.module_path("self_attn"), "mlp"
        styles = {f"{layer}.{attention}": "gather_input", f"{layer}.{mlp}": "gather_input"}
        for planned in self.projections:
            parent = mlp if planned in _MLP_PROJECTIONS else attention
            rowwise = planned in ("o_proj", "down_proj")
            styles[f"{layer}.{parent}.{self.projection_name(planned)}"] = (
                "rowwise" if rowwise else "colwise")
        if self.qk_norm == "head":
            styles.update({f"{layer}.{attention}.{n}": "head_norm" for n in ("q_norm", "k_norm")})
        styles.update({f"{layer}.{n}": "sequence_parallel" for n in NORMS[self.norm_placement]})
        styles[self.module_path("model.embed_tokens")] = "vocab_embedding"
        styles[self.module_path("model.norm")] = "sequence_parallel"
        styles["lm_head"] = "loss_parallel"
        return TensorParallelPlan(styles, heads_dim=self.qk_norm_heads_dim)

    @property
    def layer_class(self) -> str:
        return self.decoder_layer or f"{self.prefix}DecoderLayer"

    def module_classes(self) -> set[str]:
        """Module classes with parameters that a model of this family builds."""
        own = {self.prefix + s for s in ("ForCausalLM", "Model", "Attention", "MLP")}
        norm = {"LayerNorm"} if self.norm == "layernorm" else {f"{self.prefix}RMSNorm"}
        moe = ({f"{self.prefix}{s}" for s in ("SparseMoeBlock", "Experts", "TopKRouter")}
               if self.moe else set())
        return (own | norm | moe | {self.layer_class, "Embedding", "Linear", "ModuleList"}
                | set(self.extra_modules))


_LLAMA_BIAS = {"qkv_bias": "attention_bias", "o_bias": "attention_bias"}
# peft maps these onto Qwen2-MoE-style experts (Qwen3-MoE and OLMoE share the pattern).
_QWEN2_MOE_PEFT = ("gate_proj", "up_proj", "down_proj", "gate")
_QUERY_VALUE = {"peft_default_targets": ("q_proj", "v_proj")}

FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("llama", "Llama", {
        "intermediate_size": 11008, "num_key_value_heads": None, "vocab_size": 32000,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
        mlp_bias="mlp_bias", presets=("llama3-8b", "tiny-llama"), **_LLAMA_BIAS, **_QUERY_VALUE),
    Family("mistral", "Mistral", {
        "intermediate_size": 14336, "num_key_value_heads": 8, "vocab_size": 32000,
        "tie_word_embeddings": False, "sliding_window": 4096},
        window="always", presets=("mistral-7b",), **_QUERY_VALUE),
    Family("qwen2", "Qwen2", {
        "intermediate_size": 22016, "num_key_value_heads": 32, "vocab_size": 151936,
        "tie_word_embeddings": False},
        qkv_bias=True, window="flag", presets=("qwen2.5-7b", "tiny-qwen2"), **_QUERY_VALUE),
    Family("qwen3", "Qwen3", {
        "intermediate_size": 22016, "num_key_value_heads": 32, "vocab_size": 151936,
        "tie_word_embeddings": False, "attention_bias": False, "head_dim": 128},
        qk_norm="head", window="flag", presets=("qwen3-0.6b", "qwen3-32b"), **_LLAMA_BIAS,
        **_QUERY_VALUE),
    Family("gemma", "Gemma", {
        "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
        "vocab_size": 256000, "tie_word_embeddings": True, "attention_bias": False},
        fp32_norm=True, extra_modules=("GemmaTextScaledWordEmbedding",), **_LLAMA_BIAS,
        **_QUERY_VALUE),
    Family("gemma2", "Gemma2", {
        "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "vocab_size": 256000, "tie_word_embeddings": True, "attention_bias": False,
        "sliding_window": 4096, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "sliding_window_pattern": 2},
        # transformers alternates sliding and global layers (its default layer_types).
        norm_placement="sandwich", fp32_norm=True, softcap=True, window="layer_types",
        eager_only=True, extra_modules=("Gemma2TextScaledWordEmbedding",), presets=("gemma2-9b",),
        **_LLAMA_BIAS, **_QUERY_VALUE),
    Family("gemma3_text", "Gemma3", {
        "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "vocab_size": 262208, "tie_word_embeddings": True, "attention_bias": False,
        "sliding_window": 4096, "sliding_window_pattern": 6,
        "max_position_embeddings": 131072},
        norm_placement="sandwich", qk_norm="head", qk_norm_heads_dim=1, fp32_norm=True,
        softcap=True, window="layer_types",
        extra_modules=("Gemma3TextModel", "Gemma3TextScaledWordEmbedding"),
        presets=("gemma3-1b", "tiny-gemma3"), **_LLAMA_BIAS, **_QUERY_VALUE),
    Family("olmo2", "Olmo2", {
        "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "vocab_size": 50304,
        "tie_word_embeddings": False, "attention_bias": False,
        "max_position_embeddings": 2048},
        norm_placement="post", qk_norm="width", fp32_norm=True,
        presets=("olmo2-7b", "tiny-olmo2"),
        **_LLAMA_BIAS),
    Family("gpt_neox", "GPTNeoX", {
        "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 44,
        "num_attention_heads": 64, "vocab_size": 50432, "tie_word_embeddings": False,
        "attention_bias": True, "use_parallel_residual": True,
        "max_position_embeddings": 2048},
        decoder_layer="GPTNeoXLayer", fused_qkv=True, mlp="plain", mlp_bias=True,
        norm="layernorm", parallel_residual="use_parallel_residual", gqa=False,
        head_major_query=True, presets=("pythia-1.4b", "tiny-gpt-neox"),
        module_names={"model": "gpt_neox", "model.embed_tokens": "gpt_neox.embed_in",
                      "model.norm": "gpt_neox.final_layer_norm", "self_attn": "attention",
                      "self_attn.qkv_proj": "attention.query_key_value",
                      "self_attn.o_proj": "attention.dense",
                      "mlp.up_proj": "mlp.dense_h_to_4h", "mlp.down_proj": "mlp.dense_4h_to_h"},
        modules_first=("input_layernorm", "post_attention_layernorm"),
        hidden_dropout=("hidden_dropout", "hidden_dropout"), **_LLAMA_BIAS,
        peft_default_targets=("query_key_value",)),
    Family("starcoder2", "Starcoder2", {
        "hidden_size": 3072, "intermediate_size": 12288, "num_hidden_layers": 30,
        "num_attention_heads": 24, "num_key_value_heads": 2, "vocab_size": 49152,
        "tie_word_embeddings": True, "use_bias": True, "sliding_window": None,
        "max_position_embeddings": 4096},
        qkv_bias="use_bias", o_bias="use_bias", mlp="plain", mlp_bias="use_bias",
        norm="layernorm", window="always", presets=("starcoder2-3b", "tiny-starcoder2"),
        module_names={"mlp.up_proj": "mlp.c_fc", "mlp.down_proj": "mlp.c_proj"},
        hidden_dropout=("residual_dropout", "embedding_dropout")),
    Family("mixtral", "Mixtral", {
        "intermediate_size": 14336, "num_key_value_heads": 8, "vocab_size": 32000,
        "tie_word_embeddings": False, "sliding_window": None, "num_local_experts": 8,
        "num_experts_per_tok": 2, "router_aux_loss_coef": 0.001,
        "max_position_embeddings": 131072},
        window="always",
        moe=Moe("num_local_experts", peft_expert_names=("w1", "w2", "w3", "gate")),
        aliases={"num_experts": "num_local_experts"},
        presets=("mixtral-8x7b", "tiny-mixtral", "mixtral-8x22b"), **_QUERY_VALUE),
    Family("qwen3_moe", "Qwen3Moe", {
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
        "num_key_value_heads": 4, "vocab_size": 151936, "tie_word_embeddings": False,
        "attention_bias": False, "head_dim": None, "num_experts": 128,
        "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "router_aux_loss_coef": 0.001, "max_position_embeddings": 32768},
        qk_norm="head", window="flag",
        moe=Moe("num_experts", "moe_intermediate_size", peft_expert_names=_QWEN2_MOE_PEFT),
        modules_first=("experts",), aliases={"num_experts": "num_local_experts"},
        presets=("qwen3-30b-a3b", "tiny-qwen3-moe", "qwen3-235b-a22b",
                 "torchtitan-qwen3-moe-debug"), **_LLAMA_BIAS),
    Family("olmoe", "Olmoe", {
        "hidden_size": 2048, "intermediate_size": 2048, "num_hidden_layers": 16,
        "num_attention_heads": 16, "num_key_value_heads": None, "vocab_size": 50304,
        "tie_word_embeddings": False, "attention_bias": False, "num_experts": 64,
        "num_experts_per_tok": 8, "router_aux_loss_coef": 0.01},
        qk_norm="width", moe=Moe("num_experts", peft_expert_names=_QWEN2_MOE_PEFT),
        presets=("olmoe-1b-7b", "tiny-olmoe"),
        aliases={"num_local_experts": "num_experts"},
        **_LLAMA_BIAS),
    Family("phimoe", "Phimoe", {
        "intermediate_size": 6400, "num_key_value_heads": 8, "vocab_size": 32064,
        "tie_word_embeddings": False, "attention_bias": False, "lm_head_bias": False,
        "sliding_window": None, "num_local_experts": 16, "num_experts_per_tok": 2,
        "router_aux_loss_coef": 0.001, "max_position_embeddings": 131072},
        norm="layernorm", window="always", lm_head_bias="lm_head_bias",
        moe=Moe("num_local_experts", router="router", router_linear=True),
        presets=("phi3.5-moe", "tiny-phimoe"), **_LLAMA_BIAS),
    Family("gpt_oss", "GptOss", {
        "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "vocab_size": 201088, "tie_word_embeddings": False, "attention_bias": True,
        "sliding_window": 128, "sliding_window_pattern": 2, "num_local_experts": 128,
        "num_experts_per_tok": 4, "router_aux_loss_coef": 0.001,
        "max_position_embeddings": 131072},
        window="layer_types", attention_sinks=True, fp32_norm=True, eager_only=True,
        moe=Moe("num_local_experts", router_bias=True, expert_bias=True, router="router",
                width_saves=7, input_major=True),
        aliases={"num_experts": "num_local_experts"},
        presets=("gpt-oss-20b", "tiny-gpt-oss", "gpt-oss-120b", "torchtitan-gpt-oss-debug"),
        **_LLAMA_BIAS),
    Family("phi3", "Phi3", {
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "vocab_size": 32064,
        "tie_word_embeddings": False},
        mlp="gated_fused", fused_qkv=True, window="always", head_major_query=True,
        presets=("phi3-mini",), modules_first=("o_proj",),
        hidden_dropout=("resid_pdrop", None),
        tp_refused=("its fused qkv_proj and gate_up_proj hold q, k, v (gate, up) one after "
                    "the other: a column split would hand one rank the queries, another "
                    "the values")),
)}

# A factory model described by `model.geometry`: counted as a Llama-style decoder. It has
# no transformers classes, so it is not in FAMILIES (nothing to infer a wrap unit from).
CUSTOM = Family("custom", "", {"tie_word_embeddings": False, "attention_bias": False},
                tp_refused="a factory model's modules have no transformers names to split by",
                **_LLAMA_BIAS)


def family(model_type: Any) -> Family | None:
    """The registered family of a ``model_type`` (None when it has no analytic family)."""
    return FAMILIES.get(model_type) if isinstance(model_type, str) else None

