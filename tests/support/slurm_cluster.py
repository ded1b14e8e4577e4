"""A real two-node Slurm cluster on this machine, for the tests that submit exported
sbatch scripts (Debian's slurm-wlm 22.05 and munge, which .ci/run installs).

Each node is a network namespace of its own, joined to the other by one veth pair, so
torchrun's rendezvous, gloo and srun's I/O really cross hosts. Addresses exist only
inside the two namespaces (no bridge, no route, nothing in the machine's own network):

    n1  10.213.0.11   slurmctld and slurmd (the controller lives on the first node)
    n2  10.213.0.12   slurmd

Every daemon runs in its node's network namespace with a UTS and mount namespace of its
own (hostname n1 or n2; this cluster's hosts file bound over /etc/hosts there only: the
machine's /etc/hosts and /etc/slurm are untouched). `ip netns exec` is not used: it
remounts /sys and slurmd then refuses to start. The clients (sbatch, squeue, scontrol)
run in n1's network namespace, as on a login shell of the first node. munged listens on
a socket in the cluster's directory only.

Timeouts are short so that a lost node is noticed in seconds (SlurmdTimeout) and a
requeued job may start again at once (cred_expire, then `StartTime=now`).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NODES = {"n1": "10.213.0.11", "n2": "10.213.0.12"}
PREFIX = 24
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue",
           "ip", "nsenter", "unshare", "runuser")
_FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def sbin(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def missing_tools() -> list[str]:
    return [name for name in DAEMONS if sbin(name) is None]


def running(pid: int) -> bool:
    """Whether ``pid`` lives (a zombie has exited: its parent, not us, reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def digest(directory: Path) -> dict[str, str]:
    """Every file under ``directory``: its sha256 (and so its bytes), to show that a
    refused job changed nothing."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _kill_and_wait(pids: list[int], signum: int, timeout_s: float = 20) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def _slurm_conf(root: Path, socket_path: Path) -> str:
    probe = subprocess.run([sbin("slurmd"), "-C"], capture_output=True, text=True, check=True)
    cpus = re.search(r"CPUs=(\d+)", probe.stdout).group(1)
    memory = re.search(r"RealMemory=(\d+)", probe.stdout).group(1)
    nodes = "\n".join(f"NodeName={name} NodeHostname={name} NodeAddr={address} CPUs={cpus} "
                      f"RealMemory={memory} State=UNKNOWN" for name, address in NODES.items())
    return f"""ClusterName=fsdpspec
SlurmctldHost=n1({NODES['n1']})
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
SlurmdSpoolDir={root}/slurmd-%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmdTimeout=10
MessageTimeout=5
KillWait=30
InactiveLimit=0
MinJobAge=300
{nodes}
PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


@dataclass
class Cluster:
    """A running two-node cluster and the environment that submits to it."""

    root: Path
    env: dict[str, str]
    tag: str
    started: list[Path] = field(default_factory=list)  # pid files, in start order

    def netns(self, node: str) -> str:
        return f"fsdpspec-{self.tag}-{node}"

    def on_login_node(self, argv: list[str]) -> list[str]:
        """``argv`` run in n1's network (where the controller listens)."""
        return [sbin("nsenter"), f"--net=/run/netns/{self.netns('n1')}", *argv]

    def run(self, *argv: str, cwd: Path | None = None, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.on_login_node(list(argv)), env={**self.env, **(env or {})},
                              cwd=cwd, capture_output=True, text=True, timeout=timeout)

    def submit(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
        """sbatch ``argv``; the job inherits the submitting environment (with ``env``)."""
        result = self.run(*argv, cwd=cwd, env=env)
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
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} never reached {states}: {self.job(job_id)}")

    def wait_until_done(self, job_id: str, timeout_s: float = 300) -> dict[str, str]:
        return self.wait_for(job_id, _FINISHED, timeout_s)

    def start_now(self, job_id: str) -> None:
        """A requeued job waits out its credentials before it may run again; start it.
        Slurm may start it by itself first, and a short job may have finished by the
        time this looks (both seen in CI): a run that began after the requeue (which
        resets SubmitTime) is already the job's next run."""
        deadline = time.monotonic() + 120
        while (job := self.job(job_id)).get("JobState") != "PENDING":
            if job.get("JobState") in {"RUNNING", *_FINISHED} and \
                    job.get("StartTime", "") >= job.get("SubmitTime", "~"):
                return
            assert time.monotonic() < deadline, f"job {job_id} never ran again: {job}"
            time.sleep(0.5)
        result = self.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
        started = "no longer pending" in result.stderr and \
            self.job(job_id).get("JobState") not in {"PENDING"}
        assert result.returncode == 0 or started, result.stderr

    def node_pids(self, node: str) -> list[int]:
        """Every process in ``node``'s network namespace."""
        out = subprocess.run([sbin("ip"), "netns", "pids", self.netns(node)],
                             capture_output=True, text=True).stdout
        return [int(p) for p in out.split() if running(int(p))]

    def job_pids(self, node: str) -> list[int]:
        """The processes of jobs on ``node``: its namespace's, but Slurm's own daemons."""
        return [p for p in self.node_pids(node)
                if command_name(p) not in ("slurmd", "slurmctld", "slurmscriptd", "slurmstepd")]

    def lose(self, node: str) -> None:
        """The node goes away at once, with everything on it (SIGKILL to every process
        in its namespace: slurmd, the step daemons, the job's processes)."""
        _kill_and_wait(self.node_pids(node), signal.SIGKILL)

    def start_node(self, node: str) -> None:
        """slurmd of ``node`` (again, after lose())."""
        self._daemon(node, "slurmd", "-N", node)

    def _daemon(self, node: str, daemon: str, *args: str) -> None:
        """``daemon`` in ``node``'s network, with its own hostname and hosts file."""
        hosts = self.root / "hosts"
        script = ('hostname "$1"; mount --bind "$2" /etc/hosts; shift 2; exec "$@"')
        argv = [sbin("nsenter"), f"--net=/run/netns/{self.netns(node)}", sbin("unshare"),
                "--uts", "--mount", "--propagation", "slave", "sh", "-c", script, "node",
                node, str(hosts), sbin(daemon), "-f", str(self.root / "slurm.conf"), *args]
        subprocess.run(argv, env=self.env, check=True, timeout=60)

    def wait_idle(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
            if sorted(s for s in states if s) == [f"{n} idle" for n in NODES]:
                return
            assert time.monotonic() < deadline, (
                f"nodes never idle: {states}\n"
                + (self.root / "slurmctld.log").read_text()[-3000:])
            time.sleep(0.3)


def _network(cluster: Cluster) -> None:
    """Two namespaces joined by a veth pair; addresses only inside them."""
    ip = sbin("ip")
    a, b = f"fsv{cluster.tag}a", f"fsv{cluster.tag}b"
    for node in NODES:
        subprocess.run([ip, "netns", "add", cluster.netns(node)], check=True)
    subprocess.run([ip, "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    for node, end in zip(NODES, (a, b), strict=True):
        ns = cluster.netns(node)
        subprocess.run([ip, "link", "set", end, "netns", ns], check=True)
        for command in (["addr", "add", f"{NODES[node]}/{PREFIX}", "dev", end],
                        ["link", "set", end, "up"], ["link", "set", "lo", "up"]):
            subprocess.run([ip, "-n", ns, *command], check=True)


def _start_munge(root: Path) -> Path:
    """munged as the munge user, with its own key and socket."""
    munge = root / "munge"
    munge.mkdir(mode=0o755)
    user = pwd.getpwnam("munge")
    os.chown(munge, user.pw_uid, user.pw_gid)
    as_munge = [sbin("runuser"), "-u", "munge", "--"]
    subprocess.run([*as_munge, sbin("mungekey"), "--create", "--keyfile",
                    str(munge / "munge.key")], check=True)
    subprocess.run([*as_munge, sbin("munged"), "--key-file", str(munge / "munge.key"),
                    "--socket", str(munge / "munge.sock"), "--pid-file",
                    str(munge / "munged.pid"), "--log-file", str(munge / "munged.log"),
                    "--seed-file", str(munge / "seed")], check=True)
    return munge / "munge.sock"


def start_cluster() -> Cluster:
    """Bring the cluster up; on any failure, everything started so far is stopped."""
    # Not under pytest's 0700 temp root: the munge user must reach its socket.
    root = Path(tempfile.mkdtemp(prefix="fsdpspec-slurm-"))
    os.chmod(root, 0o755)
    (root / "ctld").mkdir()
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf"),
           # The submitting venv's `fsdpspec` is the one the jobs run.
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cluster = Cluster(root, env, tag=str(os.getpid() % 100000))
    try:
        _network(cluster)
        (root / "hosts").write_text("127.0.0.1 localhost\n" + "".join(
            f"{address} {name}\n" for name, address in NODES.items()))
        cluster.started.append(root / "munge" / "munged.pid")
        (root / "slurm.conf").write_text(_slurm_conf(root, _start_munge(root)))
        cluster.started.append(root / "slurmctld.pid")
        cluster._daemon("n1", "slurmctld")
        for node in NODES:
            cluster.started.append(root / f"slurmd-{node}.pid")
            cluster.start_node(node)
        cluster.wait_idle()
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def stop_cluster(cluster: Cluster) -> None:
    """Every process in the nodes' namespaces (jobs left over, then the daemons, by the
    pids their files name), munged, then the namespaces and the directory."""
    for node in NODES:
        _kill_and_wait(cluster.job_pids(node), signal.SIGKILL)
    for pid_file in reversed(cluster.started):
        if pid_file.exists():
            _kill_and_wait([int(pid_file.read_text())], signal.SIGTERM)
    for node in NODES:
        _kill_and_wait(cluster.node_pids(node), signal.SIGKILL)  # a daemon that lingered
        subprocess.run([sbin("ip"), "netns", "delete", cluster.netns(node)],
                       capture_output=True)
    shutil.rmtree(cluster.root, ignore_errors=True)
