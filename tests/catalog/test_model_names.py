"""What a model's name says of its family (fsdpspec/catalog/model_names.py): real names
of Hub repositories, torchtitan models and decoder layer classes, and the table's facts
against transformers 5.25."""

from __future__ import annotations

import pytest

from fsdpspec.catalog.families import FAMILIES
from fsdpspec.catalog.model_names import NAMES, named_family, of_model_type
from fsdpspec.catalog.presets import HUB_PRESETS, PRESETS


@pytest.mark.parametrize(("name", "model_type"), [
    ("Qwen/Qwen3-235B-A22B", "qwen3_moe"), ("Qwen/Qwen3-32B", "qwen3"),
    ("Qwen/Qwen3.5-35B-A3B", "qwen3_5_moe"), ("Qwen3_5MoeDecoderLayer", "qwen3_5_moe"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "qwen3_next"), ("Qwen3MoeDecoderLayer", "qwen3_moe"),
    ("axolotl-quants/Llama-4-Scout-17B-16E-Linearized-bnb-nf4-bf16", "llama4_text"),
    ("Llama4TextDecoderLayer", "llama4_text"), ("llama4 debugmodel", "llama4_text"),
    ("meta-llama/Llama-3.1-405B", "llama"), ("llama3 debugmodel", "llama"),
    ("axolotl-ai-co/Mistral-Small-4-119B-2603-BF16", "mistral4"),
    ("Mistral4DecoderLayer", "mistral4"), ("mistralai/Mixtral-8x22B-v0.1", "mixtral"),
    ("mistralai/Mistral-7B-v0.1", "mistral"), ("deepseek-ai/DeepSeek-V3", "deepseek_v3"),
    ("DeepseekV3DecoderLayer", "deepseek_v3"), ("deepseek_v3 debugmodel", "deepseek_v3"),
    ("zai-org/GLM-4.5-Air", "glm4_moe"), ("zai-org/GLM-4.7-Flash", "glm4_moe_lite"),
    ("Mapika/GLM-5.2-NVFP4", "glm_moe_dsa"), ("GlmMoeDsaDecoderLayer", "glm_moe_dsa"),
    ("openai/gpt-oss-120b", "gpt_oss"), ("ramdisk/gpt-oss-120b-BF16", "gpt_oss"),
    ("facebook/opt-6.7b", None), ("OPTDecoderLayer", None),
])
def test_a_name_says_its_family(name: str, model_type: str | None) -> None:
    found = named_family(name)
    assert (found.model_type if found else None) == model_type


def test_every_registered_family_has_its_names() -> None:
    assert [t for t in FAMILIES if of_model_type(t) is None] == []


@pytest.mark.parametrize("entry", [n for n in NAMES if n.model_type not in FAMILIES],
                         ids=lambda n: n.model_type)
def test_an_unregistered_family_is_a_mixture_of_experts_as_transformers_builds_it(
        entry) -> None:
    transformers = pytest.importorskip("transformers")
    text = transformers.AutoConfig.for_model(entry.model_type).get_text_config()
    experts = max(getattr(text, key, 0) or 0
                  for key in ("num_experts", "n_routed_experts", "num_local_experts"))
    assert entry.moe == (experts > 1)


def test_each_hub_id_with_a_preset_names_that_preset_s_family() -> None:
    # An importer hands a source naming one of these ids its preset (DeepSeek-V3 and
    # GLM-4.5-Air among them, issue 45): the preset is of the family the id says.
    assert {hub_id: named_family(hub_id).model_type for hub_id in HUB_PRESETS} == {
        hub_id: PRESETS[preset]["model_type"] for hub_id, preset in HUB_PRESETS.items()}
