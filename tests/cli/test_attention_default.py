"""`model.attention` defaults to `auto`: what transformers builds for the model (issue 33).
Gemma 2 and gpt-oss, which transformers builds without SDPA, validate and plan with
their defaults; `sdpa` written on them is still FS410, and `plan` plans the job and says
that the error blocks the run."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli

# Gemma 2 at its published 2B widths, as a user's config.json.
GEMMA2_CONFIG = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
    "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "vocab_size": 256000, "max_position_embeddings": 8192, "sliding_window": 4096,
    "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
}


def _spec(tmp_path: Path, model: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: attn}\n"
                    "resources: {nodes: 1, gpus_per_node: 8, accelerator: H100-80GB}\n"
                    f"{model}\n"
                    "fsdp: {mixed_precision: bf16}\n"
                    "data: {seq_len: 512, micro_batch_size: 1, global_batch_size: 8}\n")
    return path


def _gemma2(tmp_path: Path, attention: str = "") -> Path:
    (tmp_path / "gemma2").mkdir()
    (tmp_path / "gemma2" / "config.json").write_text(json.dumps(GEMMA2_CONFIG))
    written = f"\n  attention: {attention}" if attention else ""
    return _spec(tmp_path, f"model:\n  hf_config: gemma2{written}")


def test_the_tiny_gpt_oss_preset_validates_and_plans_with_its_default(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "model: {preset: tiny-gpt-oss}")
    validated = run_cli("validate", str(spec))
    assert validated.returncode == 0, validated.stdout + validated.stderr
    planned = run_cli("plan", str(spec))
    assert planned.returncode == 0, planned.stderr
    assert "peak allocated" in planned.stdout


def test_a_gemma2_config_json_plans_eager_and_show_says_why(tmp_path: Path) -> None:
    spec = _gemma2(tmp_path)
    validated = run_cli("validate", str(spec))
    assert validated.returncode == 0, validated.stdout + validated.stderr
    planned = run_cli("plan", str(spec), "--format", "json")
    assert planned.returncode == 0, planned.stderr
    shown = run_cli("show", str(spec))
    line = next(x for x in shown.stdout.splitlines() if x.strip().startswith("attention:"))
    assert line.split() == ["attention:", "eager", "#", "default", "(auto", "→", "eager)"]
    # The engine builds what the plan planned: the resolved spec records it.
    dry = run_cli("run", str(spec), "--dry-run")
    document = json.loads(dry.stdout[dry.stdout.index("{"):])
    assert document["spec"]["model"]["attention"] == "auto"
    assert document["job"]["attention"] == "eager"


def test_auto_is_sdpa_where_transformers_builds_sdpa(tmp_path: Path) -> None:
    shown = run_cli("show", str(_spec(tmp_path, "model: {preset: tiny-llama}")))
    assert "attention: sdpa" in shown.stdout and "default (auto → sdpa)" in shown.stdout


def test_sdpa_written_on_gemma2_is_fs410_and_plan_still_plans(tmp_path: Path) -> None:
    spec = _gemma2(tmp_path, "sdpa")
    validated = run_cli("validate", "--format", "concise", str(spec))
    assert validated.returncode == 1
    assert f"{spec}:7:14: FS410 error transformers builds gemma2 without SDPA" \
        in validated.stdout
    planned = run_cli("plan", str(spec))
    assert planned.returncode == 1
    assert "peak allocated" in planned.stdout  # the memory verdict is still given
    assert "the run is blocked by 1 error(s)" in planned.stderr
    assert f"{spec}:7:14" in planned.stderr and "FS410" in planned.stderr
