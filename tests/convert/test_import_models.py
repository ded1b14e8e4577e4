"""Issue 45: the model a config names, as its family. An axolotl base model resolves
from the local Hugging Face cache (the real Llama 4 Scout QLoRA file then imports as
Llama 4 with its shared-expert targets, and validates); a layer class alone says the
family: a Mixture of Experts no preset holds stops naming it, a dense model of a family
fsdpspec cannot tell gets a dense Llama whose spec line says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT
from fsdpspec.cli.main import cli
from fsdpspec.validate import check_file

SCOUT = ROOT / "tests" / "convert" / "configs" / "axolotl" / "llama-4-scout-qlora-fsdp1.yaml"
SCOUT_ID = "axolotl-quants/Llama-4-Scout-17B-16E-Linearized-bnb-nf4-bf16"
# A small Llama 4 text model (every layer a Mixture of Experts with a shared expert), wide
# enough for QLoRA's 4-bit blocks over 8 shards.
LLAMA4 = {"model_type": "llama4_text", "architectures": ["Llama4ForCausalLM"],
          "hidden_size": 512, "intermediate_size": 512, "intermediate_size_mlp": 1024,
          "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
          "head_dim": 64, "num_local_experts": 4, "num_experts_per_tok": 1,
          "vocab_size": 320, "interleave_moe_layer_step": 1}
COMMIT = "0123456789abcdef0123456789abcdef01234567"
MACHINE_RULES = {"FS411"}  # flash_attn, which the file asks for and this machine lacks


def _import(kind: str, source: Path, out: Path):
    return CliRunner().invoke(cli, ["import", kind, str(source), "-o", str(out)])


def test_a_cached_base_model_is_the_model(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("transformers")  # its family is planned off the built model
    snapshot = tmp_path / "hub" / f"models--{SCOUT_ID.replace('/', '--')}"
    (snapshot / "refs").mkdir(parents=True)
    (snapshot / "refs" / "main").write_text(COMMIT)
    (snapshot / "snapshots" / COMMIT).mkdir(parents=True)
    (snapshot / "snapshots" / COMMIT / "config.json").write_text(json.dumps(LLAMA4))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    out = tmp_path / "job.yaml"
    result = _import("axolotl", SCOUT, out)
    assert result.exit_code == 0, result.output
    spec = check_file(out).spec
    assert spec.model.hf_config == SCOUT_ID
    assert [t for t in spec.peft.target_modules if t.startswith("shared_expert.")] == [
        "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"]
    errors = {d.code for d in check_file(out).diagnostics if d.is_error}
    assert errors <= MACHINE_RULES, errors


def test_an_uncached_base_model_stops_naming_its_family(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    out = tmp_path / "job.yaml"
    result = _import("axolotl", SCOUT, out)
    assert result.exit_code == 1 and not out.exists()
    [line] = result.output.splitlines()  # one line, cut to 400 characters
    assert line.startswith(
        f"{SCOUT}:1: FS055 base_model {SCOUT_ID}: a Llama 4 model (a Mixture of Experts, "
        f"transformers' llama4_text) that no preset stands in for; pass --preset NAME, or "
        f"--hf-config {SCOUT_ID} once its config is cached (`huggingface-cli"), line
    assert line.endswith("; nothing imported")


def _accelerate(tmp_path: Path, layer: str) -> Path:
    config = tmp_path / "accelerate.yaml"
    config.write_text("distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n"
                      "  fsdp_version: 2\n"
                      f"  fsdp_transformer_layer_cls_to_wrap: {layer}\n")
    return config


@pytest.mark.parametrize(("layer", "family"), [
    ("Qwen3_5MoeDecoderLayer", "a Qwen3.5-MoE model (a Mixture of Experts, transformers' "
                               "qwen3_5_moe)"),
    ("DeepseekV3DecoderLayer", "a DeepSeek-V3 model (a Mixture of Experts, transformers' "
                               "deepseek_v3)"),
])
def test_a_layer_class_of_a_mixture_of_experts_stops_naming_it(
        layer: str, family: str, tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    config = _accelerate(tmp_path, layer)
    result = _import("accelerate", config, out)
    assert result.exit_code == 1 and not out.exists()
    assert result.output.splitlines() == [
        f"{config}:5: FS055 fsdp_transformer_layer_cls_to_wrap {layer} (and no model): "
        f"{family} that no preset stands in for; pass --hf-config DIR (the model's "
        "config.json) or --preset NAME; nothing imported"]


def test_a_dense_stand_in_for_an_unknown_family_says_both(tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    result = _import("accelerate", _accelerate(tmp_path, "OPTDecoderLayer"), out)
    assert result.exit_code == 0, result.output
    assert "  preset: llama3.2-1b               # not in the source: llama3.2-1b (Llama, " \
        "dense) stands in for a model of a family fsdpspec cannot tell: the model of " \
        "OPTDecoderLayer; your model" in out.read_text()
