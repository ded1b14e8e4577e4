"""Experiment trackers the metrics go to besides metrics.jsonl: TensorBoard, Weights &
Biases and MLflow. Each is an optional package, imported only when the spec asks for it
(pre-flight has already checked that it is installed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.engine.errors import EngineError, first_line


class Tracker(Protocol):
    def log(self, scalars: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def _require(module: str, field: str) -> Any:
    """Import an optional tracker package, or fail the run with one line."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise EngineError(f"{field} needs the {module} package installed") from None


class TensorBoard:
    def __init__(self, run_dir: Path) -> None:
        tensorboard = _require("torch.utils.tensorboard", "logging.tensorboard")
        self._writer = tensorboard.SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self._writer.add_scalar(key, value, step)

    def close(self) -> None:
        self._writer.close()


class Wandb:
    def __init__(self, spec: JobSpec, run_dir: Path) -> None:
        wandb = _require("wandb", "logging.wandb")
        settings = spec.logging.wandb
        assert settings is not None
        self._run = wandb.init(
            project=settings.project, name=settings.name or spec.metadata.name,
            mode=settings.mode, dir=str(run_dir), config=spec.as_json_data(),
            # The console is fsdpspec's (progress records included); W&B gets the metrics.
            settings=wandb.Settings(console="off"),
        )

    def log(self, scalars: dict[str, float], step: int) -> None:
        self._run.log(scalars, step=step)

    def close(self) -> None:
        self._run.finish()


def _mlflow_uri(uri: str | None, run_dir: Path) -> str:
    """The tracking URI; a file store (the default, in the run directory) is what MLflow 3
    keeps only on request, so ask for it."""
    uri = uri or (run_dir / "mlruns").absolute().as_uri()
    if uri.startswith("file:") or "://" not in uri:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


class Mlflow:
    def __init__(self, spec: JobSpec, run_dir: Path) -> None:
        mlflow = _require("mlflow", "logging.mlflow")
        settings = spec.logging.mlflow
        assert settings is not None
        self._client = mlflow.MlflowClient(_mlflow_uri(settings.tracking_uri, run_dir))
        name = settings.experiment or spec.metadata.name
        found = self._client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else self._client.create_experiment(name)
        self._run_id = self._client.create_run(
            experiment, run_name=spec.metadata.name).info.run_id
        self._metric = mlflow.entities.Metric

    def log(self, scalars: dict[str, float], step: int) -> None:
        from time import time

        now = int(time() * 1000)
        metrics = [self._metric(key, value, now, step) for key, value in scalars.items()]
        self._client.log_batch(self._run_id, metrics=metrics)

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


def open_trackers(spec: JobSpec, run_dir: Path) -> list[Tracker]:
    """The trackers the spec turns on. One that cannot start (a server that does not
    answer, a bad URI) fails the run with one line, whatever its library raised."""
    wanted = [
        ("logging.tensorboard", spec.logging.tensorboard, lambda: TensorBoard(run_dir)),
        ("logging.wandb", spec.logging.wandb is not None, lambda: Wandb(spec, run_dir)),
        ("logging.mlflow", spec.logging.mlflow is not None, lambda: Mlflow(spec, run_dir)),
    ]
    trackers: list[Tracker] = []
    for field, on, start in wanted:
        if not on:
            continue
        try:
            trackers.append(start())
        except EngineError:
            raise
        except Exception as exc:  # each library raises its own types
            raise EngineError(f"{field}: cannot start: {first_line(exc)}") from None
    return trackers
