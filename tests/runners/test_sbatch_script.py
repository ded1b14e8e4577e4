"""What the exported sbatch script asks of Slurm, read as text: resources, logs,
requeue and the warning, the run root, setup lines and containers; every example's
script is shellcheck-clean. (Running it: tests/test_runner.py against stub commands,
tests/runners/test_slurm_cluster.py on a real Slurm.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, recorded, run_cli, run_sbatch
from fsdpspec_runners.slurm import time_limit_seconds

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
MULTINODE = ROOT / "examples" / "llama3-70b-multinode.yaml"


def export(path: Path, *overrides: str) -> str:
    result = run_cli("export", "slurm", str(path), *[a for o in overrides for a in ("--set", o)])
    assert result.returncode == 0, result.stderr
    return result.stdout


def directives(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines()
            if line.startswith("#SBATCH ")]


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (.ci/run installs it)")
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_script_is_shellcheck_clean(path: Path, tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(export(path, 'launch.slurm.setup=["module load cuda/12.4"]'))
    result = subprocess.run(["shellcheck", "--severity=info", str(script)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_gpu_job_directives() -> None:
    script = export(MULTINODE, "resources.cpus_per_node=96", "launch.slurm.exclusive=true")
    assert directives(script) == [
        "--job-name=llama3-70b-pretrain", "--nodes=8", "--ntasks-per-node=1",
        "--cpus-per-task=96", f"--mem={2048 * 1024}M", "--gpus-per-node=8",
        "--partition=gpu", "--account=nlp", "--time=2-00:00:00",
        "--output=llama3-70b-pretrain-%j.out", "--error=llama3-70b-pretrain-%j.out",
        "--open-mode=append",
        "--exclusive", "--requeue", "--signal=B:USR1@198"]
    assert "--cpus-per-task=96" in script.split("srun ", 1)[1]  # srun does not inherit it


def test_cpu_job_gets_a_core_per_process_and_its_host_memory() -> None:
    lines = directives(export(QUICKSTART))
    assert "--cpus-per-task=2" in lines and "--mem=8192M" in lines
    assert not any(line.startswith("--gpus") for line in lines)


def test_the_run_directory_is_relative_to_the_submit_directory() -> None:
    script = export(QUICKSTART)
    assert "run_dir=runs/quickstart\n" in script
    assert str(ROOT) not in script.split("printf", 1)[0]  # no path of the exporting host


def test_the_log_is_in_the_submit_directory_whatever_the_run_directory() -> None:
    """Slurm opens the log before the script runs: only the submit directory is sure to
    exist then (a missing directory fails the job with no log at all)."""
    lines = directives(export(QUICKSTART, 'checkpoint.dir="runs/100%/{name}"'))
    assert "--output=quickstart-%j.out" in lines and "--error=quickstart-%j.out" in lines


def test_setup_lines_run_verbatim_before_the_launch(tmp_path: Path) -> None:
    script = export(QUICKSTART, 'launch.slurm.setup=["module load cuda/12.4", '
                                '"export FOO=\\"a b\\""]')
    body = script.split("set +u\n", 1)[1]
    assert body.startswith('module load cuda/12.4\nexport FOO="a b"\nset -u\n')
    assert body.index("set -u") < body.index("srun ")


def test_a_setup_line_cannot_hold_a_newline() -> None:
    result = run_cli("export", "slurm", str(QUICKSTART), "--set",
                     'launch.slurm.setup=["true\\nrm -rf /"]')
    assert result.returncode == 1 and "FS024" in result.stderr and result.stdout == ""


def test_a_container_runs_the_tasks_with_the_run_root_mounted(tmp_path: Path) -> None:
    script = export(QUICKSTART, "launch.slurm.container=nvcr.io#nvidia/pytorch:24.05-py3")
    ran = run_sbatch(script, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert recorded(tmp_path / "srun.argv")[4:8] == [
        "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        f"--container-mounts={tmp_path}", f"--container-workdir={tmp_path}", "fsdpspec"]


def test_a_time_limit_shorter_than_the_warning_is_refused() -> None:
    result = run_cli("export", "slurm", str(QUICKSTART), "--set", "launch.slurm.time=00:02:00")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "Error: launch.slurm.time 00:02:00 leaves no time to train: the job is warned 60 s "
        "before its end to checkpoint; set at least 00:03:00"]


def test_outside_a_job_the_script_submits_itself(tmp_path: Path) -> None:
    """`bash job.sbatch` keeps working: it calls sbatch on itself, creating nothing."""
    script = tmp_path / "job.sbatch"
    script.write_text(export(QUICKSTART))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {tmp_path}/sbatch.argv\n')
    (bin_dir / "sbatch").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "sbatch.argv").read_text() == f"{script}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "job.sbatch", "sbatch.argv"]


@pytest.mark.parametrize(("time", "seconds"), [
    ("04:00:00", 14400), ("30:00", 1800), ("1-00:00:00", 86400), ("2-12:30", 217800),
    ("100:00:00", 360000)])
def test_time_limits_are_read_as_slurm_reads_them(time: str, seconds: int) -> None:
    assert time_limit_seconds(time) == seconds
