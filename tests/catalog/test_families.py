"""The model-family registry against transformers itself: exact parameter counts (total
and active), the decoder layer the wrap policy infers, and the classes lint accepts."""

from __future__ import annotations

import math

import pytest

from fsdpspec.catalog.config_source import layer_classes
from fsdpspec.catalog.families import FAMILIES, family
from fsdpspec.catalog.presets import PRESETS, preset_config
from fsdpspec.job.geometry import UnknownFamilyError, geometry_from_config
from fsdpspec.job.model_geometry import model_geometry

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

NEW_FAMILIES = ["gemma3_text", "olmo2", "gpt_neox", "starcoder2", "mixtral", "qwen3_moe",
                "olmoe", "phimoe", "gpt_oss"]


def meta_model(config: dict):
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config))


def tiny_preset(model_type: str) -> str:
    return next(p for p in FAMILIES[model_type].presets if p.startswith("tiny-"))


def test_every_new_family_is_registered_with_a_tiny_and_a_published_preset() -> None:
    for model_type in NEW_FAMILIES:
        presets = FAMILIES[model_type].presets
        assert all(p in PRESETS for p in presets), model_type
        assert any(p.startswith("tiny-") for p in presets)
        assert any(not p.startswith("tiny-") for p in presets)


@pytest.mark.parametrize("model_type", NEW_FAMILIES)
def test_family_defaults_count_as_transformers(model_type: str) -> None:
    # A config.json holding only the widths takes every other key from the family's
    # transformers config class: the registry's defaults must agree with it.
    config = {"model_type": model_type, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 320}
    built = meta_model(config)
    assert geometry_from_config(config).total_params == sum(p.numel()
                                                            for p in built.parameters())


@pytest.mark.parametrize("model_type", NEW_FAMILIES)
def test_active_parameters_leave_out_the_unrouted_experts(model_type: str) -> None:
    config = preset_config(tiny_preset(model_type))
    g = geometry_from_config(config)
    expert = sum(p.numel() for n, p in meta_model(config).named_parameters()
                 if ".experts." in n)
    if g.experts is None:
        assert expert == 0 and g.active_params == g.total_params
        return
    share = (g.experts.count - g.experts.active) / g.experts.count
    assert g.active_params == g.total_params - math.ceil(share * expert)


@pytest.mark.parametrize("model_type", NEW_FAMILIES)
def test_wrap_infers_the_decoder_layer_transformers_builds(model_type: str) -> None:
    config = preset_config(tiny_preset(model_type))
    model = meta_model(config)
    built = {type(m).__name__ for m in model.modules() if next(m.parameters(), None) is not None}
    assert layer_classes([], config) == sorted(model._no_split_modules)
    assert built <= family(model_type).module_classes()


def test_published_moe_sizes() -> None:
    # Mixtral 8x7B: 46.7B parameters, 12.9B active; Qwen3-30B-A3B: 30.5B, 3.3B.
    mixtral = geometry_from_config(preset_config("mixtral-8x7b"))
    qwen = geometry_from_config(preset_config("qwen3-30b-a3b"))
    assert (mixtral.total_params, mixtral.active_params) == (46_702_792_704, 12_879_925_248)
    assert (qwen.total_params, qwen.active_params) == (30_532_122_624, 3_353_032_704)


@pytest.mark.parametrize(("preset", "total", "active"), [
    # Issue 45's presets, as their model cards count them: Qwen3-235B-A22B 235B with 22B
    # active, gpt-oss-120b 116.8B (5.1B active without the embeddings: 5.7B with them),
    # Mixtral 8x22B 141B with 39B active; GLM-4.5-Air 106B (12B active without the
    # embeddings: 13.4B with them), DeepSeek-V3 671B with 37B active (the card's 685B
    # adds the multi-token-prediction layer transformers does not build), Llama 4
    # Scout's text model 107.8B of the card's 109B (its vision encoder is the rest).
    # transformers runs every one of Llama 4's 16 experts on every token, scaled by its
    # router score: all its parameters are active, not the card's 17B.
    ("qwen3-235b-a22b", 235_093_634_560, 22_190_763_520),
    ("gpt-oss-120b", 116_829_156_672, 5_711_982_912),
    ("mixtral-8x22b", 140_630_071_296, 39_161_468_928),
    ("glm-4.5-air", 106_852_245_504, 13_424_123_904),
    ("deepseek-v3", 671_026_404_352, 37_552_282_624),
    ("llama4-scout", 107_769_861_120, 107_769_861_120),
])
def test_published_sizes_of_the_moe_users_bring(preset: str, total: int, active: int) -> None:
    # What the plan counts (`model_geometry`: the family's formulas, or the model built on
    # the meta device for a family without them) is what transformers builds, routed
    # experts and all: the active count leaves out the top-k's unrouted share of each
    # layer's stacked experts.
    config = preset_config(preset)
    geometry = model_geometry(config)
    built = meta_model(config)
    text = built.config.get_text_config()
    # Llama 4's config names no experts to dispatch (base_model_ep_plan): none skipped.
    routed = [p for n, p in built.named_parameters()
              if ".experts." in n] if type(text).base_model_ep_plan else []
    skipped = sum(p.numel() // p.shape[0] * (p.shape[0] - text.num_experts_per_tok)
                  for p in routed)
    assert geometry.total_params == sum(p.numel() for p in built.parameters()) == total
    assert geometry.active_params == geometry.total_params - skipped == active


def test_gpt_neox_ignores_key_value_heads_as_transformers_does() -> None:
    config = preset_config("tiny-gpt-neox") | {"num_key_value_heads": 2}
    assert geometry_from_config(config).total_params == sum(
        p.numel() for p in meta_model(config).parameters())


def test_dense_layers_between_expert_layers_are_left_to_introspection() -> None:
    config = preset_config("tiny-qwen3-moe") | {"mlp_only_layers": [0]}
    with pytest.raises(UnknownFamilyError, match="mlp_only_layers") as caught:
        geometry_from_config(config)
    assert "\n" not in str(caught.value)
    introspected = model_geometry(config)
    assert introspected.introspected
    assert introspected.total_params == sum(p.numel() for p in meta_model(config).parameters())


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_tensor_parallel_plan_names_modules_the_family_builds(model_type: str) -> None:
    # Every path the plan splits is a module of the built model, and its column and row
    # splits are the ones transformers' own `base_model_tp_plan` gives those modules.
    fam, config = FAMILIES[model_type], {"model_type": model_type, "hidden_size": 64,
                                         "num_hidden_layers": 2, "num_attention_heads": 4,
                                         "num_key_value_heads": 2, "vocab_size": 320}
    plan = fam.tensor_parallel_plan
    if plan.refused:
        assert not plan.styles
        return
    built = meta_model(config)
    names = dict(built.named_modules())
    for path in plan.styles:
        assert path.replace("*", "1") in names, path
    theirs = {f"{built.base_model_prefix}.{k}": v
              for k, v in (built.config.base_model_tp_plan or {}).items()}
    for path, style in plan.styles.items():
        if theirs.get(path) in ("colwise", "rowwise"):
            assert style == theirs[path], path
    assert plan.style_of("lm_head") == "loss_parallel"


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_experts_module_is_the_one_transformers_ep_plan_names(model_type: str) -> None:
    # The registry's experts module (EXPERTS_MODULE, for every family with a `Moe`) is
    # the module transformers' `base_model_ep_plan` dispatches to experts, and every
    # parameter it holds is a stacked expert tensor there ("grouped_gemm") of the shape
    # the geometry gives it; a dense family's config names none.
    from fsdpspec.catalog.families import EXPERTS_MODULE
    from fsdpspec.job.experts import expert_module_patterns

    if FAMILIES[model_type].moe is None:
        config_class = transformers.AutoConfig.for_model(model_type)
        assert list(expert_module_patterns(type(config_class).base_model_ep_plan)) == []
        return
    config = preset_config(tiny_preset(model_type))
    built = meta_model(config)
    plan = type(built.config).base_model_ep_plan
    assert list(expert_module_patterns(plan)) == [f"layers.*.{EXPERTS_MODULE}"]
    experts = built.get_submodule(f"{built.base_model_prefix}.layers.0.{EXPERTS_MODULE}")
    planned = dict(geometry_from_config(config).layer_tensors())
    for name, param in experts.named_parameters():
        assert plan[f"layers.*.{EXPERTS_MODULE}.{name}"] == "grouped_gemm"
        # As transformers stores them (gpt-oss input-major): FSDP may shard dim 1.
        assert planned[f"{EXPERTS_MODULE}.{name}"] == tuple(param.shape)


def test_peft_default_targets_are_peft_s_own() -> None:
    """What a LoraConfig without target_modules adapts (TRL's DPO script hands peft none
    unless --lora_target_modules says): peft's mapping, for every registered family."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    assert {t: f.peft_default_targets for t, f in FAMILIES.items()} == {
        t: tuple(TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(t, ()))
        for t in FAMILIES}
