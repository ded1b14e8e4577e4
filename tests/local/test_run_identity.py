"""The same job, really (issue 11, item 8): a run directory's identity includes the
content of the model's config.json, and every spelling of checkpoint.dir names one
directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdpspec.runfiles.resolved import absolute_inputs
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.local.rundir_setup import RunDirError, prepare_run_dir, run_dir_path

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
          "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "num_hidden_layers": 2, "vocab_size": 256, "rope_theta": 10000.0}


def job(tmp_path: Path, **checkpoint) -> JobSpec:
    data = {"apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "same"},
            "model": {"hf_config": "config.json"}, "checkpoint": checkpoint}
    return absolute_inputs(JobSpec.model_validate(data), tmp_path)


def test_a_changed_config_behind_the_same_path_is_another_job(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    run_dir = tmp_path / "run"
    assert prepare_run_dir(job(tmp_path), run_dir) is False
    assert prepare_run_dir(job(tmp_path), run_dir) is True  # the same job resumes
    config.write_text(json.dumps(CONFIG | {"rope_theta": 500000.0}))
    with pytest.raises(RunDirError, match="config.json had other contents"):
        prepare_run_dir(job(tmp_path), run_dir)


def test_every_spelling_of_checkpoint_dir_is_one_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    spellings = ["./runs/x", "runs/x/", str(tmp_path / "runs" / "x"), "runs/../runs/x"]
    paths = {run_dir_path(job(tmp_path, dir=s)) for s in spellings}
    assert paths == {tmp_path / "runs" / "x"}
    first, *others = spellings
    prepare_run_dir(job(tmp_path, dir=first), run_dir_path(job(tmp_path, dir=first)))
    for spelling in others:
        spec = job(tmp_path, dir=spelling)
        assert prepare_run_dir(spec, run_dir_path(spec)) is True


def test_a_run_from_before_auto_attention_resumes_when_auto_builds_the_same(
        tmp_path: Path) -> None:
    """A run directory written when `model.attention` defaulted to sdpa: the same spec
    now defaults to `auto`, which builds sdpa for Llama, so it is the same job; a run
    that built eager is another job (issue 33)."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    run_dir = tmp_path / "run"
    spec = job(tmp_path)
    assert prepare_run_dir(spec, run_dir) is False
    resolved = run_dir / "resolved-spec.json"
    for built, same in (("sdpa", True), ("eager", False)):
        document = json.loads(resolved.read_text())
        document["spec"]["model"]["attention"] = built  # as the older version wrote it
        document.pop("job", None)
        resolved.write_text(json.dumps(document))
        if same:
            assert prepare_run_dir(spec, run_dir) is True
        else:
            with pytest.raises(RunDirError, match="different model.attention"):
                prepare_run_dir(spec, run_dir)
