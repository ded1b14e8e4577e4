"""Shared test helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
# Shared helper modules (and the factory models the engine imports) live in support/.
sys.path.insert(0, str(ROOT / "tests" / "support"))


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


def stub_slurm_bin(tmp_path: Path, srun_body: str = "") -> Path:
    """`srun` and `scontrol` that append their argv (NUL-separated, one call a line) to
    tmp_path/<name>.argv; scontrol prints four host names, srun then runs ``srun_body``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = 'printf "%s\\0" "$@" >> {out}; printf "\\n" >> {out}\n'
    (bin_dir / "srun").write_text(
        "#!/bin/bash\n" + record.format(out=tmp_path / "srun.argv") + srun_body)
    (bin_dir / "scontrol").write_text(
        "#!/bin/bash\n" + record.format(out=tmp_path / "scontrol.argv")
        + 'printf "gpu-node-07\\ngpu-node-08\\ngpu-node-09\\ngpu-node-10\\n"\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return bin_dir


def sbatch_env(tmp_path: Path, srun_body: str = "") -> dict[str, str]:
    """The environment of an sbatch script run as job 4242 with stub Slurm commands."""
    return {**os.environ, "PATH": f"{stub_slurm_bin(tmp_path, srun_body)}:{os.environ['PATH']}",
            "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu-node-[07-10]"}


def run_sbatch(script_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run an sbatch script with bash in tmp_path (the run root) against the stubs."""
    script = tmp_path / "job.sbatch"
    script.write_text(script_text)
    return subprocess.run(["bash", str(script)], capture_output=True, text=True,
                          env=sbatch_env(tmp_path), cwd=tmp_path, timeout=30)


def recorded(path: Path) -> list[str]:
    """The argv of the last call a stub recorded."""
    return recorded_calls(path)[-1]


def recorded_calls(path: Path) -> list[list[str]]:
    """Every call's argv a stub recorded, in order."""
    return [call.split("\0") for call in path.read_text().split("\0\n")[:-1]]
