"""Shared test helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the real `fsdpspec` CLI in a subprocess (as a user would)."""
    return subprocess.run(
        [sys.executable, "-m", "fsdpspec", *args], cwd=cwd or ROOT, capture_output=True,
        text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


@pytest.fixture
def cli():
    return run_cli


def torchrun_engine(spec_data: dict, run_dir: Path, nproc: int = 2,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Write ``spec_data`` as the run's resolved spec and train it with the real engine
    under torchrun (``nproc`` CPU processes on gloo), as `fsdpspec run` launches it."""
    from fsdpspec.spec.v1 import JobSpec
    from fsdpspec_runners.local.resolved import write_resolved_spec

    spec = write_resolved_spec(JobSpec.model_validate(spec_data), run_dir)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", "-m", "fsdpspec_runners.engine", "--spec", str(spec)]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


@pytest.fixture
def train_engine():
    return torchrun_engine
