"""Hub ids resolved through a Hugging Face cache the test builds in the standard layout
(``models--org--name/refs/<rev>``, ``snapshots/<commit>/``); nothing reaches a network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from fsdpspec.catalog.hub import HubError, HubId, cache_dir, cached_snapshot, parse_hub_id, snapshot
from fsdpspec.catalog.presets import preset_config

MAIN = "0123456789abcdef0123456789abcdef01234567"
V2 = "fedcba9876543210fedcba9876543210fedcba98"


def cache_repo(hub: Path, repo: str, refs: dict[str, str], files: dict[str, str],
               repo_type: str = "model") -> None:
    folder = hub / f"{repo_type}s--{repo.replace('/', '--')}"
    for ref, commit in refs.items():
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
        (folder / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / "snapshots" / commit / name).write_text(text)


@pytest.fixture
def hf_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    config = json.dumps(preset_config("tiny-mixtral"))
    cache_repo(home / "hub", "acme/tiny-moe", {"main": MAIN, "v2": V2}, {"config.json": config})
    cache_repo(home / "hub", "acme/corpus", {"main": MAIN}, {"train.txt": "hello"}, "dataset")
    return home


@pytest.mark.parametrize(("value", "expected"), [
    ("meta-llama/Llama-3.1-8B", HubId("meta-llama/Llama-3.1-8B")),
    ("acme/tiny-moe@v2", HubId("acme/tiny-moe", "v2")),
    ("acme/tiny-moe@" + MAIN, HubId("acme/tiny-moe", MAIN)),
    ("models/llama/", None), ("/abs/path", None), ("../up/one", None), ("plain", None),
])
def test_parse_hub_id(value: str, expected: HubId | None) -> None:
    assert parse_hub_id(value) == expected


def test_snapshot_by_branch_tag_commit_and_repo_type(hf_home: Path) -> None:
    base = hf_home / "hub" / "models--acme--tiny-moe" / "snapshots"
    assert snapshot(HubId("acme/tiny-moe")) == base / MAIN
    assert snapshot(HubId("acme/tiny-moe", "v2")) == base / V2
    assert snapshot(HubId("acme/tiny-moe", V2)) == base / V2
    dataset = snapshot(HubId("acme/corpus", repo_type="dataset"))
    assert (dataset / "train.txt").read_text() == "hello"
    assert cached_snapshot(HubId("acme/corpus")) is None  # a dataset is not a model


def test_hf_hub_cache_wins_over_hf_home(hf_home: Path, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert cache_dir() == tmp_path / "elsewhere"
    assert cached_snapshot(HubId("acme/tiny-moe")) is None


def test_not_cached_offline_names_the_download_command(hf_home: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError) as caught:
        snapshot(HubId("acme/absent", "dev", "dataset"))
    message = str(caught.value)
    assert "HF_HUB_OFFLINE is set" in message and "\n" not in message
    assert "`huggingface-cli download acme/absent --repo-type dataset --revision dev`" in message


def write_job(tmp_path: Path, model: str, data: str = "") -> Path:
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: hub}\n"
                   f"resources: {{gpus_per_node: 2}}\nmodel: {model}\n"
                   f"data: {{seq_len: 64, micro_batch_size: 1, global_batch_size: 2{data}}}\n")
    return job


def test_validate_and_plan_read_a_cached_hub_config(hf_home: Path, tmp_path: Path) -> None:
    job = write_job(tmp_path, "{hf_config: acme/tiny-moe@v2}", ", tokenizer: acme/tiny-moe")
    env = {"HF_HUB_OFFLINE": "1"}
    assert run_cli("validate", str(job), env=env).returncode == 0
    plan = run_cli("plan", str(job), "--format", "json", env=env)
    assert json.loads(plan.stdout)["parameters"]["total"] == 262_976


def test_uncached_hub_ids_offline_are_one_line_errors(hf_home: Path, tmp_path: Path) -> None:
    job = write_job(tmp_path, "{hf_config: acme/gone, weights: acme/weights@v1}")
    found = run_cli("validate", str(job), "--format", "concise", env={"HF_HUB_OFFLINE": "1"})
    lines = found.stdout.splitlines()
    assert found.returncode == 1 and "Traceback" not in found.stderr
    assert lines[0].endswith("5:20: FS030 error acme/gone is not in the Hugging Face cache "
                             f"{hf_home / 'hub'} and HF_HUB_OFFLINE is set; fetch it with "
                             "`huggingface-cli download acme/gone`")


def test_uncached_weights_online_are_a_warning_run_fetches(hf_home: Path, tmp_path: Path) -> None:
    job = write_job(tmp_path, "{hf_config: acme/tiny-moe, weights: acme/weights@v1}")
    found = run_cli("validate", str(job), "--format", "concise")
    assert found.returncode == 0
    assert ":5:44: FS031 warning acme/weights@v1 is not in the Hugging Face cache" in found.stdout
    assert "`fsdpspec run` fetches it when online" in found.stdout


def test_a_local_path_wins_over_a_hub_id(hf_home: Path, tmp_path: Path) -> None:
    local = tmp_path / "acme" / "tiny-moe"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps(preset_config("tiny-olmo2")))
    job = write_job(tmp_path, "{hf_config: acme/tiny-moe}")
    plan = run_cli("plan", str(job), "--format", "json", env={"HF_HUB_OFFLINE": "1"})
    assert json.loads(plan.stdout)["parameters"]["total"] == 115_200


def test_run_resolves_hub_ids_to_cached_snapshots(hf_home: Path, tmp_path: Path) -> None:
    job = write_job(tmp_path, "{hf_config: acme/tiny-moe@v2}")
    found = run_cli("run", str(job), "--dry-run", "--set", f"checkpoint.dir={tmp_path}",
                    env={"HF_HUB_OFFLINE": "1"})
    assert found.returncode == 0, found.stderr
    resolved = json.loads(found.stdout[found.stdout.index("{"):])
    assert resolved["spec"]["model"]["hf_config"] == str(
        hf_home / "hub" / "models--acme--tiny-moe" / "snapshots" / V2)
