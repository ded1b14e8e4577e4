"""A model_type without an analytic family: `plan` builds it on the meta device and plans
from its parameters (marked introspected); without torch it says so in one line;
`validate` never needs torch for it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from fsdpspec.job.geometry import UnknownFamilyError, geometry_from_config

GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "vocab_size": 320,
        "n_positions": 128, "bos_token_id": 256, "eos_token_id": 256}


def write_job(tmp_path: Path) -> Path:
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps(GPT2))
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


def test_unknown_family_is_not_an_analytic_geometry() -> None:
    with pytest.raises(UnknownFamilyError, match="'gpt2' has no analytic family"):
        geometry_from_config(GPT2)


def test_plan_introspects_the_exact_parameters(tmp_path: Path, cli) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        built = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**GPT2))
    job = write_job(tmp_path)
    data = json.loads(cli("plan", str(job), "--format", "json").stdout)
    assert data["parameters"]["total"] == sum(p.numel() for p in built.parameters())
    assert data["parameters"]["source"] == "introspected"
    assert "(introspected: model_type gpt2)" in cli("plan", str(job)).stdout.splitlines()[0]


def test_validate_accepts_it_without_torch(tmp_path: Path) -> None:
    import subprocess

    job = write_job(tmp_path)
    found = subprocess.run(without_torch("validate", str(job)), capture_output=True, text=True,
                           cwd=ROOT)
    assert found.returncode == 0, found.stderr


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
