"""Run an sbatch script under bash with `srun` and `scontrol` stubs that record their argv."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def stub_bin(tmp_path: Path) -> Path:
    """`srun` and `scontrol` that record their argv (NUL-separated) and do nothing else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        f'#!/bin/bash\nprintf "%s\\0" "$@" > {tmp_path}/srun.argv\n')
    (bin_dir / "scontrol").write_text(
        f'#!/bin/bash\nprintf "%s\\0" "$@" > {tmp_path}/scontrol.argv\n'
        'printf "gpu-node-07\\ngpu-node-08\\ngpu-node-09\\ngpu-node-10\\n"\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return bin_dir


def run_sbatch(script_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "job.sbatch"
    script.write_text(script_text)
    env = {**os.environ, "PATH": f"{stub_bin(tmp_path)}:{os.environ['PATH']}",
           "SLURM_JOB_NODELIST": "gpu-node-[07-10]"}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=30)


def recorded(path: Path) -> list[str]:
    return path.read_text().split("\0")[:-1]
