"""A model_type without an analytic family: `plan` builds it on the meta device and plans
from its parameters (marked introspected); without torch it says so in one line;
`validate` never needs torch for it."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import ROOT
from fsdpspec.job.geometry import UnknownFamilyError, geometry_from_config

GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "vocab_size": 320,
        "n_positions": 128, "bos_token_id": 256, "eos_token_id": 256}


def write_job(tmp_path: Path, config: dict = GPT2) -> Path:
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps(config))
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: gpt2}\n"
                   "resources: {gpus_per_node: 2}\nmodel: {hf_config: gpt2/}\n"
                   "data: {seq_len: 64, micro_batch_size: 1, global_batch_size: 2}\n")
    return job


def without_torch(*args: str) -> list[str]:
    """The CLI in a Python where importing torch fails, as without the training extra."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None; "
            "from fsdpspec.cli.main import main; sys.argv = ['fsdpspec', *sys.argv[1:]]; "
            "main()")
    return [sys.executable, "-c", code, *args]


@contextmanager
def torch_device_meta():
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        yield torch


def test_unknown_family_is_not_an_analytic_geometry() -> None:
    with pytest.raises(UnknownFamilyError, match="'gpt2' has no analytic family"):
        geometry_from_config(GPT2)


def test_plan_introspects_the_exact_parameters(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    transformers = pytest.importorskip("transformers")
    with torch_device_meta():
        built = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**GPT2))
    job = write_job(tmp_path)
    data = json.loads(CliRunner().invoke(cli, ["plan", str(job), "--format", "json"]).stdout)
    assert data["parameters"]["total"] == sum(p.numel() for p in built.parameters())
    assert data["parameters"]["source"] == "introspected"
    text = CliRunner().invoke(cli, ["plan", str(job)]).stdout
    assert "(introspected: model_type gpt2)" in text.splitlines()[0]


def test_validate_without_torch_or_cache_warns_that_memory_was_not_checked(
        tmp_path: Path) -> None:
    import subprocess

    job = write_job(tmp_path)
    found = subprocess.run(without_torch("validate", str(job), "--format", "concise"),
                           capture_output=True, text=True, cwd=ROOT)
    assert found.returncode == 0, found.stderr
    assert found.stdout == (f"{job}:5:20: FS032 warning model_type 'gpt2' has no analytic "
                            "family and its geometry is not cached: the memory rules "
                            "(FS201-FS203) did not run\n")
    strict = subprocess.run(without_torch("validate", "--strict", str(job)),
                            capture_output=True, text=True, cwd=ROOT)
    assert strict.returncode == 1  # never a silent pass


def test_plan_fills_the_cache_that_validate_reads_without_torch(tmp_path: Path,
                                                                model_cache: Path) -> None:
    """A model too large for its GPUs: with torch, plan and validate agree it does not
    fit; once plan has cached its geometry, validate without torch says so too. (The
    commands with torch run through click's runner: transformers is imported once.)"""
    import subprocess

    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    pytest.importorskip("transformers")
    job = write_job(tmp_path, GPT2 | {"n_embd": 4096, "n_head": 32, "n_layer": 48,
                                      "vocab_size": 50257})
    plan = CliRunner().invoke(cli, ["plan", str(job)])
    assert plan.exit_code == 1 and "DOES NOT FIT" in plan.stdout, plan.output
    assert len(list(model_cache.glob("*.json"))) == 1
    validated = CliRunner().invoke(cli, ["validate", str(job), "--format", "concise"])
    offline = subprocess.run(without_torch("validate", str(job), "--format", "concise"),
                             capture_output=True, text=True, cwd=ROOT)
    assert validated.exit_code == offline.returncode == 1, offline.stderr
    for stdout in (validated.stdout, offline.stdout):
        assert stdout.startswith(f"{job}:4:1: FS201 error needs ")


def test_plan_without_torch_names_the_model_type_in_one_line(tmp_path: Path) -> None:
    import subprocess

    found = subprocess.run(without_torch("plan", str(write_job(tmp_path))), capture_output=True,
                           text=True, cwd=ROOT)
    assert found.returncode == 1 and found.stdout == ""
    assert found.stderr == ("info: model_type 'gpt2' has no analytic family; install "
                            "fsdpspec[train] to plan it from the model built on the meta "
                            "device\n")


def test_an_absurd_layer_count_is_refused_with_a_code_not_built() -> None:
    """A gpt2 config with 3000 layers took over 15 s to build on the meta device."""
    from fsdpspec.job.geometry import GeometryError
    from fsdpspec.job.introspect import introspected_geometry

    config = {"model_type": "gpt2", "n_layer": 3000, "n_embd": 64, "n_head": 4,
              "vocab_size": 256, "n_positions": 128}
    with pytest.raises(GeometryError, match=r"^FS043 model_type 'gpt2' declares 3000 layers"):
        introspected_geometry(config)
def test_plan_reads_per_layer_attributes_of_a_resaved_gemma4(tmp_path: Path) -> None:
    """Gemma 4 keeps some widths per layer (transformers refuses a global read): the
    model is introspected, its widest layer read, and no traceback."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(
        "gemma4_text", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=320)
    config.save_pretrained(tmp_path / "gemma4")
    (tmp_path / "gemma4" / "generation_config.json").unlink(missing_ok=True)
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: g4}\n"
                   "resources: {gpus_per_node: 2}\nmodel: {hf_config: gemma4/}\n"
                   "data: {seq_len: 64, micro_batch_size: 1, global_batch_size: 2}\n")
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    with torch_device_meta():
        built = transformers.AutoModelForCausalLM.from_config(config)
    found = CliRunner().invoke(cli, ["plan", str(job), "--format", "json"])
    assert found.exit_code == 0 and found.exception is None, found.output
    data = json.loads(found.stdout)
    assert data["parameters"]["source"] == "introspected"
    assert data["parameters"]["total"] == sum(p.numel() for p in built.parameters())


def test_auto_attention_of_an_introspected_model_is_what_transformers_builds(
        tmp_path: Path) -> None:
    """A model_type without a family whose class has no SDPA (Granite SWA): `auto`
    resolves to eager from the built class's `_supports_sdpa`, as transformers picks."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(
        "granite_swa", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=96, vocab_size=320)
    config.save_pretrained(tmp_path / "granite")
    (tmp_path / "granite" / "generation_config.json").unlink(missing_ok=True)
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: gs}\n"
                   "resources: {gpus_per_node: 2}\nmodel: {hf_config: granite/}\n"
                   "data: {seq_len: 64, micro_batch_size: 1, global_batch_size: 2}\n")
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    with torch_device_meta():
        built = transformers.AutoModelForCausalLM.from_config(config)
    assert built.config._attn_implementation == "eager"  # transformers' own choice
    found = CliRunner().invoke(cli, ["show", str(job)])
    assert found.exit_code == 0, found.output
    line = next(x for x in found.stdout.splitlines() if x.strip().startswith("attention:"))
    assert line.split() == ["attention:", "eager", "#", "default", "(auto", "→", "eager)"]
