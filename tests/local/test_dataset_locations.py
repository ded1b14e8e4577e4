"""A dataset's `path` in the resolved spec: local paths become absolute, Hub ids stay."""

from __future__ import annotations

from pathlib import Path

from fsdpspec.runfiles.resolved import absolute_inputs
from fsdpspec.spec.v1 import JobSpec


def _spec(source: str, path: str, eval_path: str | None = None) -> JobSpec:
    return JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "d"},
        "model": {"preset": "tiny-llama"},
        "data": {"source": source, "path": path, "eval": {"path": eval_path}},
    })


def test_hub_ids_stay_and_local_paths_become_absolute(tmp_path: Path) -> None:
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "local.parquet").touch()
    spec = absolute_inputs(_spec("dataset", "acme/chats@v2", "acme/local.parquet"), tmp_path)
    assert spec.data.path == "acme/chats@v2"
    assert spec.data.eval.path == str(tmp_path / "acme" / "local.parquet")


def test_a_jsonl_path_is_always_local(tmp_path: Path) -> None:
    spec = absolute_inputs(_spec("jsonl", "acme/chats"), tmp_path)
    assert spec.data.path == str(tmp_path / "acme" / "chats")
