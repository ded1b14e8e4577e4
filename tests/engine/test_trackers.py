"""logging.wandb (offline) and logging.mlflow (a local file store) receive the run's
metrics: the real libraries, no network, from a real 2-process CPU run."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from conftest import QUICKSTART, run_cli

# A real 2-process training run (the trained_run fixture, ~40 s on 2 cores).
pytestmark = pytest.mark.slow


def wandb_history(path: Path) -> list[dict]:
    """The history rows of an offline .wandb file: a LevelDB-style log (32 KiB blocks of
    records with a 7-byte header, after a 7-byte file header) of protobuf Records."""
    from wandb.proto import wandb_internal_pb2

    data, pos, pending, rows = path.read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record.FromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows


BLOCK, FULL, LAST = 32768, 1, 4


def test_wandb_offline_run_holds_every_logged_step(trained_run: dict) -> None:
    runs = list((trained_run["run_dir"] / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    rows = wandb_history(next(runs[0].glob("run-*.wandb")))
    assert [row["_step"] for row in rows] == [1, 4, 6]
    logged = {r["step"]: r for r in _metrics(trained_run["run_dir"])}
    for row in rows:
        assert row["loss"] == pytest.approx(logged[row["_step"]]["loss"])
        assert row["mfu"] == pytest.approx(logged[row["_step"]]["mfu"])


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_mlflow_file_store_holds_every_logged_step(trained_run: dict,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.MlflowClient((trained_run["run_dir"] / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("fsdpspec-test")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in history] == [1, 4, 6]
    by_step = {r["step"]: r["loss"] for r in _metrics(trained_run["run_dir"])}
    assert all(m.value == pytest.approx(by_step[m.step]) for m in history)


def test_a_tracker_that_cannot_start_fails_the_run_in_one_line(tmp_path: Path) -> None:
    result = run_cli("run", str(QUICKSTART), "--set", "train.max_steps=6",
                     "--set", "logging.mlflow.tracking_uri=bogus://nowhere",
                     cwd=tmp_path, timeout=300)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(
        "fsdpspec engine: error: logging.mlflow: cannot start: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
