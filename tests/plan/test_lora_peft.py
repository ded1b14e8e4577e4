"""The plan's LoRA against peft itself: for every registered family (a tiny config) and
every target choice the spec allows, the plan's trainable and frozen counts are what
``peft.get_peft_model`` builds on the meta device; a choice the spec refuses is one
peft would build otherwise (experts adapted) or not at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fsdpspec.catalog.families import FAMILIES
from fsdpspec.catalog.presets import preset_config
from fsdpspec.job.job import resolve
from fsdpspec.lint import lint_spec
from fsdpspec.lint.registry import LintContext
from fsdpspec.plan.lora import trainable_numel
from fsdpspec.spec.v1 import JobSpec

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def _config(model_type: str) -> dict[str, Any]:
    if model_type in BUILT:
        return BUILT[model_type]
    tiny = [p for p in FAMILIES[model_type].presets if p.startswith("tiny-")]
    if tiny:
        return preset_config(tiny[0])
    return {"model_type": model_type, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 320, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def _path(model_type: str, planned: str) -> str:
    """A projection's path below its layer, as the family names it (self_attn.q_proj)."""
    fam = FAMILIES[model_type]
    parent = "mlp" if planned.endswith(("gate_proj", "up_proj", "down_proj")) else "self_attn"
    return fam.module_names.get(f"{parent}.{planned}", f"{parent}.{planned}")


def _choices(model_type: str) -> dict[str, dict[str, Any]]:
    fam = FAMILIES[model_type]
    q = "qkv_proj" if fam.fused_qkv else "q_proj"
    leaf = _path(model_type, q).rsplit(".", 1)[-1]
    choices = {
        "default": {},
        "all-linear": {"target_modules": ["all-linear"]},
        "paths": {"target_modules": [_path(model_type, q), _path(model_type, "o_proj")]},
        "save-o_proj": {"target_modules": [leaf],
                        "modules_to_save": [fam.projection_name("o_proj")]},
        "save-norm": {"modules_to_save": ["norm"]},
        "lm_head": {"target_modules": [leaf, "lm_head"]},
    }
    if fam.moe:
        choices["mlp"] = {"target_modules": ["gate_proj", "up_proj", "down_proj"]}
        choices |= EXPERT_CHOICES
    if not _config(model_type).get("tie_word_embeddings", fam.defaults["tie_word_embeddings"]):
        choices["save-embed_tokens"] = {"modules_to_save": ["lm_head", "embed_tokens"]}
    return choices


# LoRA on the experts as peft does it (`target_parameters`, issue 45): alone, beside
# attention targets, beside a regular expression (which peft resolves to leaf names on
# the models it converts from transformers 4's names: every layer's q_proj here, though
# the expression names layer 1's), and the router's 2-D weight.
EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
EXPERT_CHOICES = {
    "experts": {"target_parameters": EXPERTS},
    "experts+attn": {"target_modules": ["q_proj", "v_proj"],
                     "target_parameters": ["experts.down_proj"]},
    "experts+regex": {"target_modules": r"model\.layers\.\d+\.self_attn\.(q|o)_proj",
                      "target_parameters": ["experts.gate_up_proj"]},
    "regex-layer1": {"target_modules": r".*\.1\.self_attn\.q_proj"},
}

# What the spec refuses, and why peft agrees: a module to save GPT-NeoX does not have
# (embed_in), all-linear and MLP names where peft adapts the experts, MLP names that match
# nothing in a Mixture of Experts peft does not convert.
REFUSED = {("gpt_neox", "save-embed_tokens"): ["FS144"],
           **{(m, "all-linear"): ["FS146"] for m in ("mixtral", "qwen3_moe", "olmoe")},
           **{(m, "mlp"): ["FS146"] for m in ("qwen3_moe", "olmoe")},
           **{(m, "mlp"): ["FS140"] for m in ("mixtral", "phimoe", "gpt_oss")}}

# A model_type without an analytic family: the plan matches in the tree transformers
# builds on the meta device (GPT-2's projections are Conv1D, which all-linear takes).
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 320,
        "n_positions": 128}
GPT2_CHOICES = {"all-linear": {"target_modules": ["all-linear"]},
                "paths": {"target_modules": ["attn.c_attn", "mlp.c_proj"]},
                "save-ln": {"target_modules": ["c_attn"], "modules_to_save": ["ln_2", "ln_f"]}}

# Built models whose layers differ: Gemma 3's vision tower (SigLIP layers beside the
# decoder layers; its pooling head's out_proj a Linear subclass), DeepSeek-V3's dense
# first layer before its Mixture of Experts, whose experts peft adapts (FS146).
_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 320, "head_dim": 16}
GEMMA3 = {"model_type": "gemma3", "mm_tokens_per_image": 16,
          "text_config": {"model_type": "gemma3_text", **_TEXT},
          "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32,
                            "intermediate_size": 64, "num_hidden_layers": 2,
                            "num_attention_heads": 2, "image_size": 32, "patch_size": 8}}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", **_TEXT, "n_routed_experts": 4,
               "num_experts_per_tok": 2, "moe_intermediate_size": 32,
               "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "kv_lora_rank": 16,
               "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
               "v_head_dim": 16}
BUILT = {"gpt2": GPT2, "gemma3": GEMMA3, "deepseek_v3": DEEPSEEK_V3}
BUILT_CHOICES = {
    "gpt2": GPT2_CHOICES,
    "gemma3": {"attn": {"target_modules": ["q_proj", "v_proj"]},
               "mlp": {"target_modules": ["gate_proj", "up_proj", "down_proj"]},
               "all-linear": {"target_modules": ["all-linear"]},
               "save-norm": {"target_modules": ["o_proj"], "modules_to_save": ["norm"]}},
    "deepseek_v3": {"o_proj": {"target_modules": ["o_proj"]},
                    "mlp": {"target_modules": ["gate_proj", "up_proj", "down_proj"]},
                    "all-linear": {"target_modules": ["all-linear"]}},
}
REFUSED |= {("deepseek_v3", "mlp"): ["FS146"], ("deepseek_v3", "all-linear"): ["FS146"]}

CASES = [(m, c) for m in FAMILIES for c in _choices(m)] + [
    (m, c) for m, choices in BUILT_CHOICES.items() for c in choices]


def _peft_counts(config: dict[str, Any], targets: list[str] | str, saves: list[str],
                 parameters: list[str] | None = None) -> tuple[int, int]:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config))
    modules = "all-linear" if targets == ["all-linear"] else targets or None
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=modules,
                           target_parameters=parameters, modules_to_save=saves or None,
                           task_type="CAUSAL_LM")
    built = peft.get_peft_model(model, lora)
    trainable = sum(p.numel() for p in built.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in built.parameters() if not p.requires_grad)


@pytest.mark.parametrize(("model_type", "choice"), CASES, ids=[f"{m}-{c}" for m, c in CASES])
def test_plan_counts_what_peft_builds(model_type: str, choice: str) -> None:
    config = _config(model_type)
    lora = (BUILT_CHOICES[model_type] if model_type in BUILT else _choices(model_type))[choice]
    spec = JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "t"},
        "model": {"preset": "tiny-llama", "attention": "eager"},
        "data": {"seq_len": 64, "global_batch_size": 8},
        "peft": {"r": 4, "alpha": 8, **lora}})
    job = resolve(spec, Path("."), config=config)
    refused = sorted({d.code for d in lint_spec(LintContext(job, set())) if d.code in
                      {"FS140", "FS143", "FS144", "FS145", "FS146"}})
    assert refused == REFUSED.get((model_type, choice), [])
    try:
        targets = lora.get("target_modules", list(job.lora_targets))
        trainable, frozen = _peft_counts(config, targets, lora.get("modules_to_save", []),
                                         lora.get("target_parameters"))
    except ValueError as exc:  # peft stops too: no target found
        assert refused == ["FS140"], f"accepted, but peft: {exc}"
        return
    planned = (trainable_numel(job), job.geometry.total_params)
    print(f"{model_type} {choice}: plan {planned} peft {(trainable, frozen)} refused {refused}")
    if refused == ["FS146"]:
        assert trainable > planned[0]  # peft adapts the experts as well
    else:  # FS144's name peft drops without a word, as the plan does
        assert planned == (trainable, frozen)
    if not refused:  # and the engine builds exactly that
        from fsdpspec_runners.engine.model_build import build_model

        engine = build_model(job, on_meta=True)
        assert (sum(p.numel() for p in engine.parameters() if p.requires_grad),
                sum(p.numel() for p in engine.parameters() if not p.requires_grad)) == planned


# The Llama-3-8B job: rank 16 on q_proj and v_proj (6.8 M trainable), and a
# module to save that peft copies in every layer.
LLAMA3_8B = ["--set", "peft.r=16", "--set", "peft.target_modules=[q_proj,v_proj]"]


@pytest.mark.parametrize("saves", [["o_proj"], ["norm"]])
def test_plan_counts_peft_modules_to_save_on_llama3_8b(saves: list[str]) -> None:
    import json

    from conftest import run_cli

    result = run_cli("plan", "examples/lora-llama3-8b-l40s.yaml", *LLAMA3_8B,
                     "--set", f"peft.modules_to_save=[{','.join(saves)}]", "--format", "json")
    assert result.returncode in (0, 1) and not result.stderr, result.stderr
    planned, saved = (json.loads(result.stdout)["peft"][key]
                      for key in ("trainable_parameters", "modules_saved"))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**preset_config("llama3-8b")))
    built = peft.get_peft_model(model, peft.LoraConfig(
        r=16, target_modules=["q_proj", "v_proj"], modules_to_save=saves))
    trainable = sum(p.numel() for p in built.parameters() if p.requires_grad)
    copies = sum(isinstance(m, peft.utils.ModulesToSaveWrapper) for m in built.modules())
    print(f"llama3-8b modules_to_save {saves}: plan {planned:,} in {saved} module(s), "
          f"peft {trainable:,} in {copies}")
    assert (planned, saved) == (trainable, copies)


def test_validate_takes_peft_names_and_refuses_by_name(tmp_path: Path) -> None:
    """Path targets and all-linear validate (peft accepts them); GPT-NeoX's embed_tokens
    (its module is embed_in) and Qwen3-MoE's and DeepSeek-V3's expert names are refused
    by name."""
    import json

    from conftest import run_cli

    specs = {
        "paths": "model: {preset: llama3-8b}\npeft: {target_modules: [self_attn.q_proj, v_proj]}",
        "all-linear": "model: {preset: llama3-8b}\npeft: {target_modules: [all-linear]}",
        "neox": "model: {preset: pythia-1.4b}\npeft: {modules_to_save: [embed_tokens]}",
        "moe": "model: {preset: qwen3-30b-a3b}\npeft: {target_modules: [q_proj, down_proj]}",
    }
    head = ("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: t}\n"
            "resources: {accelerator: H100-80GB}\n")
    # A Mixture of Experts without a family: the model built on the meta device answers.
    (tmp_path / "deepseek").mkdir()
    (tmp_path / "deepseek" / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    specs["deepseek"] = "model: {hf_config: deepseek}\npeft: {target_modules: [o_proj, down_proj]}"
    for name, body in specs.items():
        (tmp_path / f"{name}.yaml").write_text(head + body + "\n")
    files = [f"{name}.yaml" for name in sorted(specs)]
    result = run_cli("validate", "--format", "concise", *files, cwd=tmp_path, timeout=300,
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert result.returncode == 1
    lines = [line for line in result.stdout.splitlines() if ": FS14" in line]
    assert lines == [
        "deepseek.yaml:6:33: FS146 error peft.target_modules 'down_proj': peft converts it "
        "into adapters on the experts and router of model_type 'deepseek_v3' at ranks of its "
        "own, which fsdpspec does not plan",
        "moe.yaml:6:33: FS146 error peft.target_modules 'down_proj': peft converts it into "
        "adapters on the experts and router of Qwen3Moe models at ranks of its own, which "
        "fsdpspec does not plan",
        "neox.yaml:6:26: FS144 error peft.modules_to_save 'embed_tokens' matches no module of "
        "GPTNeoX models (it calls it embed_in)"], result.stdout


def test_plan_counts_the_vision_tower_peft_adapts(tmp_path: Path) -> None:
    """A multimodal config.json (Gemma 3: SigLIP vision layers beside the decoder
    layers): peft adapts q_proj and v_proj in both, and the plan counts both."""
    import json

    from conftest import run_cli

    (tmp_path / "gemma3").mkdir()
    (tmp_path / "gemma3" / "config.json").write_text(json.dumps(GEMMA3))
    (tmp_path / "job.yaml").write_text(
        "apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: t}\n"
        "resources: {accelerator: H100-80GB}\nmodel: {hf_config: gemma3}\n"
        "data: {seq_len: 64, global_batch_size: 8}\n"
        "peft: {r: 4, target_modules: [q_proj, v_proj]}\n")
    result = run_cli("plan", "job.yaml", "--format", "json", cwd=tmp_path, timeout=300,
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stdout + result.stderr
    planned = json.loads(result.stdout)["peft"]["trainable_parameters"]
    assert planned == _peft_counts(GEMMA3, ["q_proj", "v_proj"], [])[0] == 2816


def test_an_imported_config_with_path_targets_validates(tmp_path: Path) -> None:
    """axolotl hands peft `lora_target_modules` as written; peft matches a path suffix
    (self_attn.q_proj), so the imported spec keeps it and validates."""
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli
    from fsdpspec.validate import check_file

    source, out = tmp_path / "axolotl.yaml", tmp_path / "job.yaml"
    source.write_text("base_model: mistralai/Mistral-7B-v0.1\nfsdp_version: 2\nbf16: true\n"
                      "micro_batch_size: 1\nadapter: lora\nlora_r: 16\nlora_alpha: 32\n"
                      "lora_target_modules:\n  - self_attn.q_proj\n  - self_attn.v_proj\n")
    result = CliRunner().invoke(cli, ["import", "axolotl", str(source), "-o", str(out)])
    assert result.exit_code == 0, result.output
    report = check_file(out)
    assert report.spec.peft.target_modules == ["self_attn.q_proj", "self_attn.v_proj"]
    assert [d.code for d in report.diagnostics if d.code.startswith("FS14")] == []
    assert [len(report.job.adapters.linears), report.job.adapters.r] == [2, 16]
