"""Configs read the way transformers reads them: every preset's config (one of a family
without formulas built on the meta device), loaded and re-saved by transformers (what a
fine-tune's output directory ships), plans with exactly the parameter count of the
original; special floats, aliases and 0 meaning "disabled" are read as transformers
reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdpspec.catalog.config_source import ModelConfigError, read_hf_config
from fsdpspec.catalog.configjson import load_object
from fsdpspec.catalog.families import FAMILIES
from fsdpspec.catalog.presets import preset_config, preset_names
from fsdpspec.job.geometry import geometry_from_config
from fsdpspec.job.model_geometry import model_geometry

transformers = pytest.importorskip("transformers")

# Published configs whose expert counts differ from their config class's default, so an
# alias read wrongly falls back to the default and miscounts.
QWEN3_CODER_480B = {  # Qwen/Qwen3-Coder-480B-A35B-Instruct
    "model_type": "qwen3_moe", "hidden_size": 6144, "intermediate_size": 8192,
    "moe_intermediate_size": 2560, "num_hidden_layers": 62, "num_attention_heads": 96,
    "num_key_value_heads": 8, "head_dim": 128, "num_experts": 160, "num_experts_per_tok": 8,
    "vocab_size": 151936, "max_position_embeddings": 262144, "tie_word_embeddings": False}
OLMOE_RESAVED_ALIAS = {"model_type": "olmoe", "num_local_experts": 32, "hidden_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 320}
CONFIGS = {**{name: preset_config(name) for name in preset_names()},
           "qwen3-coder-480b": QWEN3_CODER_480B, "olmoe-alias": OLMOE_RESAVED_ALIAS}


def _resaved(config: dict, directory: Path) -> dict:
    transformers.AutoConfig.for_model(**config).save_pretrained(directory)
    return read_hf_config(str(directory), directory)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_resaved_config_plans_the_same_parameters(name: str, tmp_path: Path) -> None:
    original = CONFIGS[name]
    resaved = _resaved(original, tmp_path)
    # What the plan counts: a family without formulas (DeepSeek-V3…) built on the meta device.
    assert model_geometry(resaved).total_params == model_geometry(original).total_params, name


def test_the_480b_moe_counts_its_160_experts() -> None:
    g = geometry_from_config(QWEN3_CODER_480B)
    assert g.experts is not None and g.experts.count == 160
    assert round(g.total_params / 1e9) == 480


def test_special_floats_are_read_as_transformers_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "nemotron_h",
                                "time_step_limit": [0.0, {"__float__": "Infinity"}],
                                "other": {"__float__": "NaN"}, "low": -1e308}))
    data = load_object(path)
    assert data["time_step_limit"] == [0.0, float("inf")] and data["other"] != data["other"]
    path.write_text('{"model_type": "nemotron_h", "time_step_limit": [0.0, Infinity]}')
    assert load_object(path)["time_step_limit"] == [0.0, float("inf")]


def test_a_size_the_planner_reads_must_still_be_finite(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        '{"model_type": "llama", "rope_theta": {"__float__": "Infinity"}}')
    with pytest.raises(ModelConfigError, match="rope_theta must be a finite number, got Infinity"):
        read_hf_config(str(tmp_path), tmp_path)


def test_a_sliding_window_of_zero_is_disabled(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(preset_config("tiny-qwen2") | {
        "sliding_window": 0, "use_sliding_window": True}))
    g = geometry_from_config(read_hf_config(str(tmp_path), tmp_path))
    assert g.sliding_window is None


def test_an_unknown_float_tag_stays_an_object(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "x", "v": {"__float__": "Huge"}}')
    assert load_object(path)["v"] == {"__float__": "Huge"}


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_the_registry_knows_each_config_class_aliases(model_type: str) -> None:
    config_class = transformers.CONFIG_MAPPING[model_type]
    assert FAMILIES[model_type].aliases == dict(getattr(config_class, "attribute_map", {}))
