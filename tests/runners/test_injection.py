"""Spec values are data, never code: a spec whose every free string field holds command
substitution, backticks, `;` and newlines creates no file through `run --dry-run`, a real
`run` on CPU, the sbatch script (run against stub srun/scontrol) or the manifest.

Fields a pattern or an enum constrains (name, rdzv_endpoint, time, factory, dtypes…)
cannot hold the payload; every other string does, including the input paths (which
exist: directories and files named by the payload) and the run directory.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from conftest import recorded, run_cli, run_sbatch
from fsdpspec.catalog.presets import preset_config
from fsdpspec.runfiles.resolved import absolute_inputs
from fsdpspec.spec.v1 import JobSpec
from fsdpspec.validate import check_file


def payload(markers: Path, tag: str) -> str:
    """Four ways a shell would run `touch`, each naming its own marker file."""
    m = markers / tag
    return f"$(touch {m}-dollar) `touch {m}-tick` ; touch {m}-semi\ntouch {m}-newline #"


def hostile_spec(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The spec file, with its input files created under the payload names."""
    markers = tmp_path / "markers"
    markers.mkdir()
    spec_dir = tmp_path / "spec"
    hf_dir = spec_dir / payload(markers, "hf")
    hf_dir.mkdir(parents=True)
    (hf_dir / "config.json").write_text(json.dumps(preset_config("tiny-llama")))
    field = payload(markers, "field")
    data_file = spec_dir / payload(markers, "data")
    data_file.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({field: "the quick brown fox jumps over the lazy dog " * 20})] * 40
    data_file.write_text("\n".join(lines) + "\n")
    spec = {
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob",
        "metadata": {"name": "hostile", "description": payload(markers, "description"),
                     "labels": {payload(markers, "label-key"): payload(markers, "label")}},
        "resources": {"gpus_per_node": 2, "accelerator": "cpu"},
        "model": {"hf_config": payload(markers, "hf")},
        "data": {"source": "jsonl", "path": payload(markers, "data"), "text_field": field,
                 "seq_len": 32, "micro_batch_size": 1, "global_batch_size": 2},
        "optimizer": {"scheduler": {"name": "constant"}},
        "train": {"max_steps": 2},
        "checkpoint": {"dir": "runs/{name}/" + payload(markers, "dir"), "interval_steps": 2},
        "logging": {"interval_steps": 1},
        "launch": {"env": {"FSDPSPEC_TEST_VALUE": payload(markers, "env")},
                   "kubernetes": {"namespace": payload(markers, "namespace"),
                                  "image": payload(markers, "image")}},
    }
    path = spec_dir / "job.yaml"
    yaml = YAML()
    with open(path, "w") as fh:
        yaml.dump(spec, fh)
    return path, spec


def assert_no_markers(tmp_path: Path) -> None:
    assert list((tmp_path / "markers").iterdir()) == []


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    path, spec = hostile_spec(tmp_path)
    result = run_cli("validate", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    return path, spec


def test_dry_run(hostile, tmp_path: Path) -> None:
    path, _ = hostile
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    result = run_cli("run", str(path), "--dry-run", cwd=cwd)
    assert result.returncode == 0, result.stderr
    # The command (quoted newlines and all), then the resolved spec as JSON.
    command, document = result.stdout.split('\n{\n  "fsdpspec_version"', 1)
    document = '{"fsdpspec_version"' + document
    argv = shlex.split(command)  # the printed command is one a shell reads back intact
    assert argv[argv.index("--spec") + 1].endswith("/resolved-spec.json")
    assert json.loads(document)["spec"]["data"]["text_field"] == hostile[1]["data"]["text_field"]
    assert list(cwd.iterdir()) == []  # a dry run starts and writes nothing
    assert_no_markers(tmp_path)


@pytest.mark.slow
def test_run_on_cpu(hostile, tmp_path: Path) -> None:
    path, spec = hostile
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    result = subprocess.run([sys.executable, "-m", "fsdpspec", "run", str(path)], cwd=cwd,
                            capture_output=True, text=True, timeout=170)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = cwd / spec["checkpoint"]["dir"].replace("{name}", "hostile")
    assert (run_dir / "final").is_dir() and (run_dir / "metrics.jsonl").is_file()
    assert_no_markers(tmp_path)


def test_sbatch_script(hostile, tmp_path: Path) -> None:
    """Every value reaches the job intact, a line break in the run directory too (no
    #SBATCH line holds it): the spec file the script writes is the spec."""
    path, _ = hostile
    script = tmp_path / "job.sbatch"
    result = run_cli("export", "slurm", str(path), "-o", str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    ran = run_sbatch(script.read_text(), tmp_path)
    assert ran.returncode == 0, ran.stderr
    spec = check_file(path).spec
    assert spec is not None
    spec_file = f"{spec.run_dir()}/slurm/job-4242.json"
    assert recorded(tmp_path / "srun.argv")[4:] == ["fsdpspec", "run", spec_file]
    written = JobSpec.model_validate(json.loads((tmp_path / spec_file).read_text()))
    assert written == absolute_inputs(spec, path.parent)
    assert_no_markers(tmp_path)


def test_sbatch_refuses_hostile_slurm_names(hostile, tmp_path: Path) -> None:
    path, _ = hostile
    marker = payload(tmp_path / "markers", "partition")
    result = run_cli("export", "slurm", str(path), "--set",
                     f"launch.slurm.partition={json.dumps(marker)}")
    assert result.returncode == 1 and "launch.slurm.partition" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert_no_markers(tmp_path)


def test_manifest(hostile, tmp_path: Path) -> None:
    path, spec = hostile
    result = run_cli("export", "kubernetes", str(path))
    assert result.returncode == 0, result.stderr
    config_map, job = YAML(typ="safe").load_all(result.stdout)
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    # An argv of fixed words: every spec value travels in the ConfigMap, as data.
    assert container["command"] == ["fsdpspec", "run", "/etc/fsdpspec/job.json"]
    assert container["image"] == spec["launch"]["kubernetes"]["image"]
    assert job["metadata"]["labels"] == spec["metadata"]["labels"]
    document = json.loads(config_map["data"]["job.json"])
    assert document["metadata"]["description"] == spec["metadata"]["description"]
    assert document["launch"]["env"] == spec["launch"]["env"]
    assert_no_markers(tmp_path)


def test_env_name_is_refused_not_run(tmp_path: Path) -> None:
    """A hostile environment variable NAME: the schema refuses it, at its line, before any
    runner sees it."""
    path, _ = hostile_spec(tmp_path)
    key = payload(tmp_path / "markers", "env-key")
    path.write_text(path.read_text().replace("FSDPSPEC_TEST_VALUE", json.dumps(key)))
    for args in (["export", "slurm"], ["export", "kubernetes"], ["run", "--dry-run"]):
        result = run_cli(*args, str(path), cwd=tmp_path)
        assert result.returncode == 1, args
        last = result.stderr.strip().splitlines()[-1]
        assert ": FS024 error " in last and "does not match the pattern" in last, last
        assert "Traceback" not in result.stderr and result.stdout == ""
    assert os.listdir(tmp_path / "markers") == []
