"""Exported sbatch scripts on a real single-node Slurm (Debian's slurm-wlm and munge,
which .ci/run installs): the daemons start here, in a temporary directory with their own
ports and munge socket, and stop by pid at the end.

1. the exported quickstart, submitted, trains to completion;
2. `scontrol requeue` mid-run: the job checkpoints on SIGTERM, requeues, resumes and
   ends with the weights of an uninterrupted run, bit for bit; its log keeps both halves;
3. the same job with another learning rate, submitted into the same run directory, fails
   with the one-line refusal `fsdpspec run` gives, and the first run's files stay as
   they were;
4. a job that reaches its time limit is warned first (SIGUSR1), checkpoints and requeues.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

QUICKSTART = ROOT / "examples" / "quickstart.yaml"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue")


def _sbin(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _slurm_conf(root: Path, host: str, socket_path: Path) -> str:
    probe = subprocess.run([_sbin("slurmd"), "-C"], capture_output=True, text=True, check=True)
    cpus = re.search(r"CPUs=(\d+)", probe.stdout).group(1)
    memory = re.search(r"RealMemory=(\d+)", probe.stdout).group(1)
    return f"""ClusterName=fsdpspec
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path},cred_expire=5
MailProg=/bin/true
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/slurmd
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
KillWait=30
InactiveLimit=0
MinJobAge=300
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


@dataclass
class Slurm:
    """A running single-node cluster and the environment that submits to it."""

    env: dict[str, str]

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, cwd=cwd, capture_output=True,
                              text=True, timeout=60)

    def submit(self, argv: list[str], cwd: Path) -> str:
        result = self.run(*argv, cwd=cwd)
        assert result.returncode == 0, result.stdout + result.stderr
        return re.search(r"Submitted batch job (\d+)", result.stdout).group(1)

    def job(self, job_id: str) -> dict[str, str]:
        text = self.run("scontrol", "show", "job", job_id).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_for(self, job_id: str, states: set[str], timeout_s: float = 300) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            time.sleep(1)
        raise AssertionError(f"job {job_id} never reached {states}: {self.job(job_id)}")

    def start_now(self, job_id: str) -> None:
        """A requeued job waits out its credentials before it may run again; start it."""
        self.wait_for(job_id, {"PENDING"}, timeout_s=120)
        result = self.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
        assert result.returncode == 0, result.stderr


def _running(pid: int) -> bool:
    """Whether ``pid`` lives (a zombie has exited: its parent, not us, reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _stop(pid_file: Path) -> None:
    """SIGTERM to the daemon named in ``pid_file``; wait for it to exit."""
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.2)


def _start_munge(root: Path) -> Path:
    """munged as the munge user, with its own key and socket."""
    munge = root / "munge"
    munge.mkdir(mode=0o755)
    user = pwd.getpwnam("munge")
    os.chown(munge, user.pw_uid, user.pw_gid)
    as_munge = ["runuser", "-u", "munge", "--"]
    subprocess.run([*as_munge, _sbin("mungekey"), "--create", "--keyfile",
                    str(munge / "munge.key")], check=True)
    subprocess.run([*as_munge, _sbin("munged"), "--key-file", str(munge / "munge.key"),
                    "--socket", str(munge / "munge.sock"), "--pid-file",
                    str(munge / "munged.pid"), "--log-file", str(munge / "munged.log"),
                    "--seed-file", str(munge / "seed")], check=True)
    return munge / "munge.sock"


@pytest.fixture(scope="session")
def slurm() -> Iterator[Slurm]:
    missing = [name for name in (*DAEMONS, "mungekey", "runuser") if _sbin(name) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"a real Slurm needs root and {', '.join(missing) or 'its daemons'} "
                    "(.ci/run installs slurm-wlm and munge)")
    # Not under pytest's 0700 temp root: the munge user must reach its socket.
    root = Path(tempfile.mkdtemp(prefix="fsdpspec-slurm-"))
    os.chmod(root, 0o755)
    for sub in ("ctld", "slurmd"):
        (root / sub).mkdir()
    conf = root / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf),
           # The submitting venv's `fsdpspec` is the one the jobs run.
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    pid_files = [root / "slurmd.pid", root / "slurmctld.pid", root / "munge" / "munged.pid"]
    try:
        conf.write_text(_slurm_conf(root, socket.gethostname().split(".")[0],
                                    _start_munge(root)))
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([_sbin(daemon), "-f", str(conf)], env=env, check=True)
        cluster = Slurm(env)
        deadline = time.monotonic() + 60
        while cluster.run("sinfo", "-h", "-o", "%T").stdout.strip() != "idle":
            assert time.monotonic() < deadline, (root / "slurmctld.log").read_text()[-2000:]
            time.sleep(0.5)
        yield cluster
        cluster.run("scancel", "--user", "root")
        deadline = time.monotonic() + 60
        while cluster.run("squeue", "-h").stdout.strip() and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        for pid_file in pid_files:
            _stop(pid_file)
        shutil.rmtree(root, ignore_errors=True)


def export(root: Path, *overrides: str) -> Path:
    """The quickstart exported into the run root ``root``, as job.sbatch."""
    script = root / "job.sbatch"
    args = [a for o in overrides for a in ("--set", o)]
    result = subprocess.run([sys.executable, "-m", "fsdpspec", "export", "slurm",
                             str(QUICKSTART), *args, "-o", str(script)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return script


def log_of(root: Path, job_id: str) -> str:
    return (root / "runs" / "quickstart" / "slurm" / f"{job_id}.out").read_text()


def digest(directory: Path) -> dict[str, str]:
    """Every file under ``directory``: its sha256 (and so its bytes)."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def quickstart_run(slurm: Slurm, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Item 1: the quickstart exported unedited and submitted (`bash THIS_FILE` makes the
    log directory and calls sbatch), run to its end."""
    root = tmp_path_factory.mktemp("quickstart")
    job_id = slurm.submit(["bash", str(export(root))], cwd=root)
    job = slurm.wait_for(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
    assert job["JobState"] == "COMPLETED", log_of(root, job_id)
    return root, job_id


def test_exported_quickstart_trains_to_completion(quickstart_run: tuple[Path, str]) -> None:
    root, job_id = quickstart_run
    run_dir = root / "runs" / "quickstart"
    log = log_of(root, job_id)
    assert "starting quickstart" in log and "step 40/40" in log
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step-*")) == [
        "step-00000020", "step-00000040"]
    assert (run_dir / "resolved-spec.json").is_file()


def test_a_different_lr_is_refused_and_the_first_run_is_untouched(
        slurm: Slurm, quickstart_run: tuple[Path, str]) -> None:
    """Item 3: the same one-line refusal as `fsdpspec run`; nothing of the first run
    changes."""
    root, _ = quickstart_run
    run_dir = root / "runs" / "quickstart"
    before = digest(run_dir / "checkpoints") | digest(run_dir / "final")
    other = root / "other"
    other.mkdir()
    script = export(other, "optimizer.lr=0.001")
    job_id = slurm.submit(["sbatch", str(script)], cwd=root)
    assert slurm.wait_for(job_id, {"COMPLETED", "FAILED"})["JobState"] == "FAILED"
    local = subprocess.run([sys.executable, "-m", "fsdpspec", "run", str(QUICKSTART),
                            "--set", "optimizer.lr=0.001"], cwd=root, capture_output=True,
                           text=True, timeout=60)
    refusal = local.stderr.strip().splitlines()[-1]
    assert local.returncode == 1 and "with a different optimizer.lr" in refusal
    assert refusal in log_of(root, job_id).splitlines()
    assert "Traceback" not in log_of(root, job_id)
    assert digest(run_dir / "checkpoints") | digest(run_dir / "final") == before


def test_requeue_checkpoints_resumes_and_matches_an_uninterrupted_run(
        slurm: Slurm, tmp_path: Path) -> None:
    """Item 2: `scontrol requeue` while it trains."""
    job = ("train.max_steps=120", "checkpoint.interval_steps=1000", "logging.interval_steps=1")
    root = tmp_path / "slurm"
    root.mkdir()
    (root / "runs" / "quickstart" / "slurm").mkdir(parents=True)
    job_id = slurm.submit(["sbatch", str(export(root, *job))], cwd=root)
    deadline = time.monotonic() + 300
    log = root / "runs" / "quickstart" / "slurm" / f"{job_id}.out"
    while not (log.exists() and "\nstep 10/" in log.read_text()):
        assert time.monotonic() < deadline, slurm.job(job_id)
        time.sleep(0.5)
    assert slurm.run("scontrol", "requeue", job_id).returncode == 0
    slurm.start_now(job_id)
    final = slurm.wait_for(job_id, {"COMPLETED", "FAILED", "CANCELLED"})
    text = log_of(root, job_id)
    assert final["JobState"] == "COMPLETED" and final["Restarts"] == "1", text
    stopped = re.search(r"stopped by SIGTERM at step (\d+); checkpoint saved", text)
    assert stopped, text
    # Both halves, in order, in one log.
    first, second = text.split("resuming quickstart", 1)
    assert "starting quickstart" in first and stopped.group(0) in first
    assert f"(step {stopped.group(1)})" in second and "step 120/120" in second

    reference = tmp_path / "reference"
    reference.mkdir()
    straight = subprocess.run(
        [sys.executable, "-m", "fsdpspec", "run", str(QUICKSTART),
         *[a for o in job for a in ("--set", o)]],
        cwd=reference, capture_output=True, text=True, timeout=600)
    assert straight.returncode == 0, straight.stderr[-3000:]
    weights = "runs/quickstart/final/model.safetensors"
    assert (root / weights).read_bytes() == (reference / weights).read_bytes()


def test_the_time_limit_is_warned_and_checkpointed_before_the_kill(
        slurm: Slurm, tmp_path: Path) -> None:
    """Item 4: 4 minutes, warned at least 60 s ahead (--signal=B:USR1@60): the job stops
    with a checkpoint of the step it reached, and requeues itself."""
    script = export(tmp_path, "train.max_steps=1000000", "checkpoint.interval_steps=0",
                    "logging.interval_steps=100", "launch.slurm.time=00:04:00")
    assert "#SBATCH --signal=B:USR1@60" in script.read_text()
    (tmp_path / "runs" / "quickstart" / "slurm").mkdir(parents=True)
    job_id = slurm.submit(["sbatch", str(script)], cwd=tmp_path)
    deadline = time.monotonic() + 420
    requeued = slurm.job(job_id)
    while requeued.get("Restarts") == "0" and requeued["JobState"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, requeued
        time.sleep(1)
        requeued = slurm.job(job_id)
    # The requeue passes through COMPLETING (the step's processes end) to PENDING.
    requeued = slurm.wait_for(job_id, {"PENDING", "TIMEOUT", "FAILED", "COMPLETED"}, 120)
    slurm.run("scancel", job_id)
    text = log_of(tmp_path, job_id)
    assert requeued["JobState"] == "PENDING" and requeued["Restarts"] == "1", text
    stopped = re.search(r"stopped by SIG\w+ at step (\d+); checkpoint saved", text)
    assert stopped, text
    checkpoints = tmp_path / "runs" / "quickstart" / "checkpoints"
    assert (checkpoints / f"step-{int(stopped.group(1)):08d}").is_dir()
    assert "stopped ahead of the time limit; requeueing" in text
    assert "CANCELLED" not in text.split("requeueing")[0]  # it ended before any kill
