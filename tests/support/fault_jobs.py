"""What the fault-injection tests share: a job file built from tests/engine/test_engine.py's
small spec, started with `fsdpspec run` exactly as a user starts it (real torchrun,
2 processes on gloo)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine_jobs import BASE, ROOT, launch_env, merged

NAME = BASE["metadata"]["name"]


def job_file(directory: Path, override: dict[str, Any]) -> Path:
    """``directory/job.yaml`` (JSON is YAML) whose run directory is ``directory/NAME``."""
    data = merged(BASE, {**override, "checkpoint": {
        **override.get("checkpoint", {}), "dir": f"{directory}/{{name}}"}})
    path = directory / "job.yaml"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def run_dir(job: Path) -> Path:
    return job.parent / NAME


def run_argv(job: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "fsdpspec", "run", str(job), *args]


def run_env(**extra: str) -> dict[str, str]:
    """One thread per process, so every run does the same floating-point work (bitwise
    comparisons), and support/ for the factory models: as engine_jobs launches."""
    return launch_env(extra)


def fsdpspec_run(job: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`fsdpspec run JOB ARGS` to the end; ``env`` adds test hooks."""
    return subprocess.run(run_argv(job, *args), cwd=ROOT, env=run_env(**env),
                          capture_output=True, text=True, timeout=300)
