"""Built-in model presets, stored as Hugging Face-style ``config.json`` data.

The planner reads the geometry from these dicts and the engine hands the same dict to
``AutoConfig.for_model`` so that what is planned is what is trained. Values follow the
published ``config.json`` of each model; only fields that change geometry or the
architecture are kept.
"""

from __future__ import annotations

import copy
from typing import Any


def _llama(**kw: Any) -> dict[str, Any]:
    base = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
    }
    return base | kw


def _qwen2(**kw: Any) -> dict[str, Any]:
    base = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
    }
    return base | kw


def _gemma2(**kw: Any) -> dict[str, Any]:
    base = {
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 8192,
        "vocab_size": 256000,
        "tie_word_embeddings": True,
        "sliding_window": 4096,
    }
    return base | kw


_LLAMA3 = {"vocab_size": 128256, "rope_theta": 500000.0, "max_position_embeddings": 8192}
_LLAMA31_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

PRESETS: dict[str, dict[str, Any]] = {
    # Tiny models for tests and the CPU quickstart (vocab fits the byte-level tokenizer).
    "tiny-llama": _llama(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=320, max_position_embeddings=512,
    ),
    "tiny-qwen2": _qwen2(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=320, max_position_embeddings=512,
        tie_word_embeddings=True,
    ),
    "llama2-7b": _llama(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096,
    ),
    "llama2-13b": _llama(
        hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
        num_key_value_heads=40, vocab_size=32000, max_position_embeddings=4096,
    ),
    "llama2-70b": _llama(
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096,
    ),
    "llama3-8b": _llama(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, **_LLAMA3,
    ),
    "llama3-70b": _llama(
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, **_LLAMA3,
    ),
    # torchtitan's CP table trains it at 32k–256k tokens (docs/memory.md).
    "llama3.1-8b": _llama(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0,
        max_position_embeddings=131072, rope_scaling=_LLAMA31_ROPE,
    ),
    "llama3.1-405b": _llama(
        hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
        num_attention_heads=128, num_key_value_heads=8, vocab_size=128256,
        rope_theta=500000.0, max_position_embeddings=131072, rope_scaling=_LLAMA31_ROPE,
    ),
    "llama3.2-1b": _llama(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, rope_theta=500000.0,
        max_position_embeddings=131072, tie_word_embeddings=True,
        rope_scaling=_LLAMA31_ROPE | {"factor": 32.0},
    ),
    "llama3.2-3b": _llama(
        hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
        num_key_value_heads=8, head_dim=128, vocab_size=128256, rope_theta=500000.0,
        max_position_embeddings=131072, tie_word_embeddings=True,
        rope_scaling=_LLAMA31_ROPE | {"factor": 32.0},
    ),
    "mistral-7b": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_act": "silu",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "tie_word_embeddings": False,
    },
    "qwen2.5-0.5b": _qwen2(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
    ),
    "qwen2.5-7b": _qwen2(
        hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
        num_key_value_heads=4, vocab_size=152064,
    ),
    "qwen2.5-72b": _qwen2(
        hidden_size=8192, intermediate_size=29568, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=152064,
    ),
    "gemma2-2b": _gemma2(
        hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256,
    ),
    "gemma2-9b": _gemma2(
        hidden_size=3584, intermediate_size=14336, num_hidden_layers=42, num_attention_heads=16,
        num_key_value_heads=8, head_dim=256,
    ),
    "gemma2-27b": _gemma2(
        hidden_size=4608, intermediate_size=36864, num_hidden_layers=46, num_attention_heads=32,
        num_key_value_heads=16, head_dim=128,
    ),
    "phi3-mini": {
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "hidden_act": "silu",
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32064,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    },
}


_TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 320,
         "max_position_embeddings": 512, "bos_token_id": 256, "eos_token_id": 256}
_TINY_MOE = {"num_experts_per_tok": 2, "router_aux_loss_coef": 0.01}


def _family(model_type: str, architecture: str, **kw: Any) -> dict[str, Any]:
    return {"architectures": [architecture], "model_type": model_type} | kw


PRESETS.update({
    # Tiny instances of the newer families (dense and Mixture-of-Experts).
    "tiny-gemma3": _family("gemma3_text", "Gemma3ForCausalLM", **_TINY, head_dim=16,
                           sliding_window=8, layer_types=["sliding_attention",
                                                          "full_attention"]),
    "tiny-olmo2": _family("olmo2", "Olmo2ForCausalLM", **_TINY),
    "tiny-gpt-neox": _family("gpt_neox", "GPTNeoXForCausalLM", **_TINY | {
        "num_key_value_heads": 4}, rotary_pct=0.25),
    "tiny-starcoder2": _family("starcoder2", "Starcoder2ForCausalLM", **_TINY),
    "tiny-mixtral": _family("mixtral", "MixtralForCausalLM", **_TINY, **_TINY_MOE,
                            num_local_experts=4),
    "tiny-qwen3-moe": _family("qwen3_moe", "Qwen3MoeForCausalLM", **_TINY, **_TINY_MOE,
                              head_dim=16, num_experts=4, moe_intermediate_size=32),
    "tiny-olmoe": _family("olmoe", "OlmoeForCausalLM", **_TINY, **_TINY_MOE, num_experts=4),
    "tiny-phimoe": _family("phimoe", "PhimoeForCausalLM", **_TINY, **_TINY_MOE,
                           num_local_experts=4),
    "tiny-gpt-oss": _family("gpt_oss", "GptOssForCausalLM", **_TINY, **_TINY_MOE,
                            head_dim=16, num_local_experts=4, sliding_window=8,
                            layer_types=["sliding_attention", "full_attention"]),
    # Published configs (geometry keys only).
    "gemma3-1b": _family(
        "gemma3_text", "Gemma3ForCausalLM", hidden_size=1152, intermediate_size=6912,
        num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
        vocab_size=262144, sliding_window=512, max_position_embeddings=32768,
        rope_theta=1000000.0, query_pre_attn_scalar=256, tie_word_embeddings=True),
    "olmo2-7b": _family(
        "olmo2", "Olmo2ForCausalLM", hidden_size=4096, intermediate_size=11008,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
        vocab_size=100352, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_theta=500000.0),
    "pythia-1.4b": _family(
        "gpt_neox", "GPTNeoXForCausalLM", hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=24, num_attention_heads=16, vocab_size=50304, rotary_pct=0.25,
        max_position_embeddings=2048, use_parallel_residual=True),
    "starcoder2-3b": _family(
        "starcoder2", "Starcoder2ForCausalLM", hidden_size=3072, intermediate_size=12288,
        num_hidden_layers=30, num_attention_heads=24, num_key_value_heads=2,
        vocab_size=49152, sliding_window=4096, max_position_embeddings=16384,
        rope_theta=999999.4420358813, tie_word_embeddings=True),
    "mixtral-8x7b": _family(
        "mixtral", "MixtralForCausalLM", hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=32000, num_local_experts=8, num_experts_per_tok=2,
        max_position_embeddings=32768, rope_theta=1000000.0, router_aux_loss_coef=0.02),
    "qwen3-30b-a3b": _family(
        "qwen3_moe", "Qwen3MoeForCausalLM", hidden_size=2048, intermediate_size=6144,
        moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
        norm_topk_prob=True, vocab_size=151936, max_position_embeddings=40960,
        rope_theta=1000000.0),
    "olmoe-1b-7b": _family(
        "olmoe", "OlmoeForCausalLM", hidden_size=2048, intermediate_size=1024,
        num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
        num_experts=64, num_experts_per_tok=8, vocab_size=50304,
        max_position_embeddings=4096),
    "phi3.5-moe": _family(
        "phimoe", "PhimoeForCausalLM", hidden_size=4096, intermediate_size=6400,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        num_local_experts=16, num_experts_per_tok=2, vocab_size=32064,
        max_position_embeddings=131072, attention_bias=True, lm_head_bias=True),
    "gpt-oss-20b": _family(
        "gpt_oss", "GptOssForCausalLM", hidden_size=2880, intermediate_size=2880,
        num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
        num_local_experts=32, num_experts_per_tok=4, vocab_size=201088,
        sliding_window=128, max_position_embeddings=131072),
    # The Mixtures of Experts users bring, as their published config.json files say
    # (geometry keys only), each from the Hub repository its comment names.
    "gpt-oss-120b": _family(  # openai/gpt-oss-120b
        "gpt_oss", "GptOssForCausalLM", hidden_size=2880, intermediate_size=2880,
        num_hidden_layers=36, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
        num_local_experts=128, num_experts_per_tok=4, vocab_size=201088,
        sliding_window=128, max_position_embeddings=131072, rope_theta=150000.0),
    "qwen3-235b-a22b": _family(  # Qwen/Qwen3-235B-A22B
        "qwen3_moe", "Qwen3MoeForCausalLM", hidden_size=4096, intermediate_size=12288,
        moe_intermediate_size=1536, num_hidden_layers=94, num_attention_heads=64,
        num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
        norm_topk_prob=True, vocab_size=151936, max_position_embeddings=40960,
        rope_theta=1000000.0),
    "mixtral-8x22b": _family(  # mistralai/Mixtral-8x22B-v0.1
        "mixtral", "MixtralForCausalLM", hidden_size=6144, intermediate_size=16384,
        num_hidden_layers=56, num_attention_heads=48, num_key_value_heads=8,
        vocab_size=32768, num_local_experts=8, num_experts_per_tok=2,
        max_position_embeddings=65536, rope_theta=1000000.0, router_aux_loss_coef=0.001),
    # Three Mixture-of-Experts families the analytic registry does not hold (dense first
    # layers, shared experts beside the routed, latent attention): planned from the model
    # transformers builds on the meta device (`fsdpspec.job.introspect`), its count exact.
    # zai-org/GLM-4.5-Air (106B; 12B active without the embeddings): one dense layer, then
    # 128 routed experts (top 8) and a shared one; half of each head rotary, q/k/v biased.
    "glm-4.5-air": _family(
        "glm4_moe", "Glm4MoeForCausalLM", hidden_size=4096, intermediate_size=10944,
        moe_intermediate_size=1408, num_hidden_layers=46, first_k_dense_replace=1,
        num_attention_heads=96, num_key_value_heads=8, head_dim=128,
        partial_rotary_factor=0.5, attention_bias=True, use_qk_norm=False,
        n_routed_experts=128, n_shared_experts=1, num_experts_per_tok=8, n_group=1,
        topk_group=1, norm_topk_prob=True, routed_scaling_factor=1.0, vocab_size=151552,
        max_position_embeddings=131072, rope_theta=1000000.0, rms_norm_eps=1e-5),
    # deepseek-ai/DeepSeek-V3 (671B, 37B active): multi-head latent attention (q and kv
    # low-rank, a rotary part apart), 3 dense layers, then 256 routed experts (top 8 of
    # 4 groups of 8) and a shared one. Its multi-token-prediction layer
    # (num_nextn_predict_layers: 1, 14B more) is not built by transformers, nor planned.
    "deepseek-v3": _family(
        "deepseek_v3", "DeepseekV3ForCausalLM", hidden_size=7168, intermediate_size=18432,
        moe_intermediate_size=2048, num_hidden_layers=61, first_k_dense_replace=3,
        num_attention_heads=128, num_key_value_heads=128, q_lora_rank=1536,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8, n_group=8,
        topk_group=4, norm_topk_prob=True, routed_scaling_factor=2.5, vocab_size=129280,
        max_position_embeddings=163840, rope_theta=10000.0, rms_norm_eps=1e-6,
        rope_scaling={"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                      "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                      "mscale_all_dim": 1.0}),
    # meta-llama/Llama-4-Scout-17B-16E's text_config (108B of its 109B; 17B active): 16
    # experts, top 1, beside a shared expert in every layer (interleave_moe_layer_step 1);
    # intermediate_size is an expert's width, intermediate_size_mlp a dense layer's.
    "llama4-scout": _family(
        "llama4_text", "Llama4ForCausalLM", hidden_size=5120, intermediate_size=8192,
        intermediate_size_mlp=16384, num_hidden_layers=48, num_attention_heads=40,
        num_key_value_heads=8, head_dim=128, num_local_experts=16, num_experts_per_tok=1,
        interleave_moe_layer_step=1, use_qk_norm=True, attention_chunk_size=8192,
        vocab_size=202048, max_position_embeddings=262144, rope_theta=500000.0,
        rms_norm_eps=1e-5, rope_scaling=_LLAMA31_ROPE),
    # Dense Qwen3 (Qwen/Qwen3-0.6B, Qwen/Qwen3-32B): torchtitan's qwen3 0.6B and 32B flavors.
    "qwen3-0.6b": _family(
        "qwen3", "Qwen3ForCausalLM", hidden_size=1024, intermediate_size=3072,
        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True),
    "qwen3-32b": _family(
        "qwen3", "Qwen3ForCausalLM", hidden_size=5120, intermediate_size=25600,
        num_hidden_layers=64, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
        vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False),
    # torchtitan's debug flavors of its MoE models (pytorch/torchtitan 238fa9953e4a,
    # torchtitan/models/qwen3/__init__.py "debugmodel_moe" and
    # torchtitan/models/gpt_oss/__init__.py "debugmodel", with GptOssModelArgs' defaults):
    # small enough to train on CPUs.
    "torchtitan-qwen3-moe-debug": _family(
        "qwen3_moe", "Qwen3MoeForCausalLM", hidden_size=256, intermediate_size=3072,
        moe_intermediate_size=768, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, num_experts=64, num_experts_per_tok=8,
        norm_topk_prob=True, vocab_size=2048, max_position_embeddings=4096,
        rope_theta=1000000.0, rms_norm_eps=1e-6),
    # torchtitan/models/deepseek_v3/__init__.py "debugmodel" (pytorch/torchtitan
    # 238fa9953e4a, the debug TOML's commit): one dense layer then MoE, 8 routed experts
    # (top 3) beside 2 shared, latent attention without a q low rank. Its router scores
    # by softmax; transformers' deepseek_v3 by sigmoid with a correction bias (the import
    # says so): the shape and the count are the flavor's. max_position_embeddings is
    # YaRN's factor × its original 4096, as transformers reads it (torchtitan
    # precomputes 16384 positions).
    "torchtitan-deepseek-v3-debug": _family(
        "deepseek_v3", "DeepseekV3ForCausalLM", hidden_size=256, intermediate_size=1024,
        moe_intermediate_size=256, num_hidden_layers=6, first_k_dense_replace=1,
        num_attention_heads=16, num_key_value_heads=16, q_lora_rank=None, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=8,
        n_shared_experts=2, num_experts_per_tok=3, n_group=1, topk_group=1,
        norm_topk_prob=False, routed_scaling_factor=1.0, vocab_size=2048,
        max_position_embeddings=163840, rope_theta=10000.0,
        rope_scaling={"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                      "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                      "mscale_all_dim": 0.7}),
    # torchtitan/models/llama4/__init__.py "debugmodel" (238fa9953e4a) with
    # TransformerModelArgs' and MoEArgs' defaults: MoE on every second layer (8 experts of
    # width 512, top 1, sigmoid scores applied before the experts, and a shared expert),
    # dense layers of width 768, every layer rotary and fully causal (every_n_layers_nope
    # unset, so no fixed attention blocks either: transformers' NoPE interval past the
    # last layer, no chunk size) and no q/k norm.
    "torchtitan-llama4-debug": _family(
        "llama4_text", "Llama4ForCausalLM", hidden_size=256, intermediate_size=512,
        intermediate_size_mlp=768, num_hidden_layers=6, num_attention_heads=16,
        num_key_value_heads=16, head_dim=16, num_local_experts=8, num_experts_per_tok=1,
        interleave_moe_layer_step=2, no_rope_layer_interval=7, attention_chunk_size=None,
        use_qk_norm=False,
        vocab_size=2048, max_position_embeddings=1048576, rope_theta=500000.0,
        rms_norm_eps=1e-5, rope_scaling={"rope_type": "llama3", "factor": 16.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                                         "original_max_position_embeddings": 8192}),
    "torchtitan-gpt-oss-debug": _family(
        "gpt_oss", "GptOssForCausalLM", hidden_size=256, intermediate_size=2880,
        num_hidden_layers=4, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
        num_local_experts=8, num_experts_per_tok=4, vocab_size=201088,
        sliding_window=128, max_position_embeddings=131072, rope_theta=150000.0),
})


def preset_names() -> list[str]:
    """Preset names, in table order."""
    return list(PRESETS)


def preset_config(name: str) -> dict[str, Any]:
    """A fresh copy of a preset's config dict (callers may mutate it)."""
    return copy.deepcopy(PRESETS[name])


# Hub ids whose published config.json has a preset's geometry, for the importers: a
# source that names one of these models gets the preset (no download needed to plan it).
HUB_PRESETS: dict[str, str] = {
    "meta-llama/Llama-2-7b-hf": "llama2-7b",
    "NousResearch/Llama-2-7b-hf": "llama2-7b",
    "meta-llama/Llama-2-13b-hf": "llama2-13b",
    "meta-llama/Llama-2-70b-hf": "llama2-70b",
    "meta-llama/Meta-Llama-3-8B": "llama3-8b",
    "NousResearch/Meta-Llama-3-8B": "llama3-8b",
    "meta-llama/Meta-Llama-3-70B": "llama3-70b",
    "meta-llama/Llama-3.1-405B": "llama3.1-405b",
    "meta-llama/Llama-3.2-1B": "llama3.2-1b",
    "meta-llama/Llama-3.2-3B": "llama3.2-3b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "Qwen/Qwen2.5-0.5B": "qwen2.5-0.5b",
    "Qwen/Qwen2.5-7B": "qwen2.5-7b",
    "Qwen/Qwen2.5-72B": "qwen2.5-72b",
    "google/gemma-2-2b": "gemma2-2b",
    "google/gemma-2-9b": "gemma2-9b",
    "google/gemma-2-27b": "gemma2-27b",
    "microsoft/Phi-3-mini-4k-instruct": "phi3-mini",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "mistralai/Mixtral-8x22B-v0.1": "mixtral-8x22b",
    "zai-org/GLM-4.5-Air": "glm-4.5-air",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "Qwen/Qwen3-0.6B": "qwen3-0.6b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "EleutherAI/pythia-1.4b": "pythia-1.4b",
    "bigcode/starcoder2-3b": "starcoder2-3b",
}
