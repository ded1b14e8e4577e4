"""Parameter counts without torch equal what transformers instantiates."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT
from fsdpspec.catalog.presets import PRESETS, preset_config
from fsdpspec.job.geometry import GeometryError, geometry_from_config
from fsdpspec.job.model_geometry import model_geometry

MODELS = ROOT / "tests" / "models"
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3"]


def transformers_count(config: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_count_equals_transformers(name: str) -> None:
    # The plan's count: its family's formulas, or (DeepSeek-V3, GLM-4.5-Air, Llama 4
    # Scout: families without them) the model built on the meta device.
    config = preset_config(name)
    assert model_geometry(config).total_params == transformers_count(config)


@pytest.mark.parametrize("family", FAMILIES)
def test_local_config_count_equals_transformers(family: str) -> None:
    config = json.loads((MODELS / family / "config.json").read_text())
    assert config["model_type"] == family
    assert geometry_from_config(config).total_params == transformers_count(config)


@pytest.mark.parametrize("extra", [{"attention_bias": True}, {"mlp_bias": True},
                                   {"tie_word_embeddings": True}, {"head_dim": 32}])
def test_llama_options_change_the_count_as_transformers_does(extra: dict) -> None:
    config = preset_config("tiny-llama") | extra
    assert geometry_from_config(config).total_params == transformers_count(config)


def test_published_sizes() -> None:
    # Known totals: Llama 3 8B and Llama 3.1 405B as their model cards count them.
    assert geometry_from_config(preset_config("llama3-8b")).total_params == 8_030_261_248
    assert geometry_from_config(preset_config("llama3.1-405b")).total_params == 405_853_388_800


def test_missing_keys_take_the_family_defaults() -> None:
    # Mistral's config class defaults to 8 key/value heads, Llama's to all heads.
    assert geometry_from_config({"model_type": "mistral"}).num_kv_heads == 8
    assert geometry_from_config({"model_type": "llama"}).num_kv_heads == 32


def test_spec_geometry_counts_as_a_llama_decoder() -> None:
    geometry = {"model_type": "custom", "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 320}
    assert (geometry_from_config(geometry).total_params
            == geometry_from_config(preset_config("tiny-llama")).total_params)


@pytest.mark.parametrize("bad", [{"hidden_size": "4k"}, {"num_hidden_layers": 0},
                                 {"model_type": "gpt2"}])
def test_uncountable_configs_raise_one_line_errors(bad: dict) -> None:
    with pytest.raises(GeometryError) as caught:
        geometry_from_config(preset_config("tiny-llama") | bad)
    assert "\n" not in str(caught.value)
