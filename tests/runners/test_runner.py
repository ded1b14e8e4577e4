"""Runner goldens: the torchrun argv (one node, several, CPU), the sbatch script (bash -n,
then run against stub `srun` and `scontrol` that record their argv) and the PyTorchJob
manifest. Regenerate the text goldens with FSDPSPEC_REGEN=1, then read them. The real
Slurm runs are in tests/runners/test_slurm_cluster.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

from conftest import ROOT, recorded, recorded_calls, run_sbatch, sbatch_env
from fsdpspec.spec.names import kubernetes_name
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.kubernetes import manifest, manifest_documents
from fsdpspec_runners.launch_error import LaunchError
from fsdpspec_runners.slurm import sbatch_script
from fsdpspec_runners.torchrun import build_torchrun_argv, launch_env

GOLDEN = ROOT / "tests" / "runners" / "golden"
RUN_DIR = Path("/scratch/runs/llama-sft")


def job(**sections: Any) -> JobSpec:
    data: dict[str, Any] = {"apiVersion": "fsdpspec/v1", "kind": "TrainingJob",
                            "metadata": {"name": "llama-sft"}, "model": {"preset": "llama3-8b"}}
    data.update(sections)
    return JobSpec.model_validate(data)


SINGLE = job(resources={"gpus_per_node": 8, "accelerator": "H100-80GB"},
             launch={"env": {"NCCL_DEBUG": "WARN"}})
MULTI = job(resources={"nodes": 4, "gpus_per_node": 8, "accelerator": "H100-80GB"},
            launch={"rdzv_endpoint": "node-0:29400", "max_restarts": 2,
                    "env": {"NCCL_DEBUG": "INFO"},
                    "slurm": {"partition": "gpu", "account": "nlp", "time": "1-00:00:00"},
                    "kubernetes": {"namespace": "training", "image": "ghcr.io/acme/fsdp:1"}},
            metadata={"name": "llama-sft", "labels": {"team": "nlp"}})
CPU = job(resources={"gpus_per_node": 2, "accelerator": "cpu"}, model={"preset": "tiny-llama"},
          launch={"env": {"OMP_NUM_THREADS": "3", "GLOO_SOCKET_IFNAME": "lo"}})


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("FSDPSPEC_REGEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


# ---- torchrun ---------------------------------------------------------------------------

def test_single_node_argv_is_standalone() -> None:
    assert build_torchrun_argv(SINGLE, RUN_DIR) == [
        "torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", "8",
        "--max-restarts", "0", "-m", "fsdpspec_runners.engine",
        "--spec", "/scratch/runs/llama-sft/resolved-spec.json",
    ]


def test_multi_node_argv_uses_c10d_rendezvous() -> None:
    assert build_torchrun_argv(MULTI, RUN_DIR, node_rank=3) == [
        "torchrun", "--nnodes", "4", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "node-0:29400", "--rdzv-id", "llama-sft", "--node-rank", "3",
        "--nproc-per-node", "8", "--max-restarts", "2", "-m", "fsdpspec_runners.engine",
        "--spec", "/scratch/runs/llama-sft/resolved-spec.json",
    ]


def test_cpu_argv_and_threads() -> None:
    argv = build_torchrun_argv(CPU, RUN_DIR, launcher=("python", "-m", "torch.distributed.run"))
    assert argv[:3] == ["python", "-m", "torch.distributed.run"]
    assert argv[3:] == ["--standalone", "--nnodes", "1", "--nproc-per-node", "2",
                        "--max-restarts", "0", "-m", "fsdpspec_runners.engine",
                        "--spec", "/scratch/runs/llama-sft/resolved-spec.json"]
    # launch.env wins over the CPU default; without it each process gets its share.
    assert launch_env(CPU, {"PATH": "/bin"}, cpu_count=8) == {
        "PATH": "/bin", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "3",
        "GLOO_SOCKET_IFNAME": "lo"}
    plain = job(resources={"gpus_per_node": 2, "accelerator": "cpu"},
                model={"preset": "tiny-llama"})
    assert launch_env(plain, {}, cpu_count=8)["OMP_NUM_THREADS"] == "4"
    assert launch_env(plain, {"OMP_NUM_THREADS": "1"}, cpu_count=8)["OMP_NUM_THREADS"] == "1"


def test_gpu_env_has_no_thread_default() -> None:
    assert launch_env(SINGLE, {}, cpu_count=64) == {"PYTHONUNBUFFERED": "1",
                                                    "NCCL_DEBUG": "WARN"}


# ---- Slurm --------------------------------------------------------------------------------

GRACE_S = 90


def test_sbatch_golden() -> None:
    check_golden("sbatch-multinode.sh", sbatch_script(MULTI, GRACE_S))
    check_golden("sbatch-single.sh", sbatch_script(SINGLE, GRACE_S))


@pytest.mark.parametrize("spec", [MULTI, SINGLE, CPU], ids=["multi", "single", "cpu"])
def test_sbatch_passes_bash_n(spec: JobSpec, tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(spec, GRACE_S))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


WRAPPER = ('exits=$1; shift; exec "$@" --node-rank "$SLURM_NODEID" '
           '--exit-record "$exits/$SLURM_NODEID"')


def test_sbatch_runs_fsdpspec_run_on_every_node_with_the_head_node(tmp_path: Path) -> None:
    result = run_sbatch(sbatch_script(MULTI, GRACE_S), tmp_path)
    assert result.returncode == 0, result.stderr
    assert recorded(tmp_path / "scontrol.argv") == ["show", "hostnames", "gpu-node-[07-10]"]
    spec_file = "runs/llama-sft/slurm/job-4242.json"
    port = str(16384 + 4242 % 16384)
    assert recorded(tmp_path / "srun.argv") == [
        "--nodes=4", "--ntasks-per-node=1", "--cpus-per-task=32", "--kill-on-bad-exit=1",
        "bash", "-c", WRAPPER, "fsdpspec-node", "runs/llama-sft/slurm/exits-4242",
        "fsdpspec", "run", spec_file, "--nnodes", "4",
        "--rdzv-endpoint", f"gpu-node-07:{port}", "--rdzv-id", "4242"]
    # The task's bash puts its node into the command, and its own exit record.
    task = subprocess.run(["bash", "-c", WRAPPER, "fsdpspec-node", "exits", "echo"],
                          env={**os.environ, "SLURM_NODEID": "3"}, capture_output=True,
                          text=True, check=True)
    assert task.stdout == "--node-rank 3 --exit-record exits/3\n"
    written = json.loads((tmp_path / spec_file).read_text())
    assert JobSpec.model_validate(written) == MULTI


def test_schema_refuses_a_partition_that_would_break_out() -> None:
    with pytest.raises(ValidationError, match="partition"):
        job(launch={"slurm": {"partition": "gpu\ntouch pwned"}})


# ---- Kubernetes ---------------------------------------------------------------------------

def test_manifest_golden() -> None:
    check_golden("pytorchjob-multinode.yaml", manifest(MULTI, GRACE_S))


def test_manifest_follows_the_training_operator_rules() -> None:
    config_map, job_doc = YAML(typ="safe").load_all(manifest(MULTI, GRACE_S))
    assert job_doc["apiVersion"] == "kubeflow.org/v1" and job_doc["kind"] == "PyTorchJob"
    assert job_doc["metadata"] == {"name": "llama-sft", "namespace": "training",
                                   "labels": {"team": "nlp"}}
    assert job_doc["spec"]["nprocPerNode"] == "8"
    assert job_doc["spec"]["runPolicy"] == {"backoffLimit": 2}
    replicas = job_doc["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"}
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
    for replica in replicas.values():
        pod = replica["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == GRACE_S
        (container,) = pod["containers"]
        assert container["name"] == "pytorch"
        assert container["image"] == "ghcr.io/acme/fsdp:1"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert container["command"] == [
            "fsdpspec", "run", "/etc/fsdpspec/job.json", "--nnodes", "4",
            "--node-rank", "$(RANK)", "--rdzv-endpoint",
            "$(MASTER_ADDR):$(MASTER_PORT)", "--rdzv-id", "llama-sft"]
        assert pod["volumes"][0]["configMap"]["name"] == config_map["metadata"]["name"]
    assert JobSpec.model_validate(json.loads(config_map["data"]["job.json"])) == MULTI


def test_single_node_manifest_has_only_a_master() -> None:
    _, job_doc = manifest_documents(SINGLE.model_copy(update={"launch": MULTI.launch}), GRACE_S)
    assert list(job_doc["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    (container,) = job_doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"]
    assert container["command"] == ["fsdpspec", "run", "/etc/fsdpspec/job.json"]


def test_manifest_needs_an_image() -> None:
    with pytest.raises(LaunchError, match="launch.kubernetes.image"):
        manifest(SINGLE, GRACE_S)


@pytest.mark.parametrize(("name", "expected"), [
    ("llama-sft", "llama-sft"), ("Qwen2.5_7B", "qwen2-5-7b"), ("7b-run", "job-7b-run")])
def test_kubernetes_names(name: str, expected: str) -> None:
    assert kubernetes_name(name) == expected


def test_bash_is_available() -> None:
    assert shutil.which("bash"), "the sbatch tests need bash"


def test_the_warning_is_relayed_and_the_job_requeued(tmp_path: Path) -> None:
    """Slurm's SIGUSR1 to the batch shell: the trap relays it to srun (which stops, as
    `fsdpspec run` does, with 128 + SIGUSR1), then requeues the job."""
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(CPU, GRACE_S))
    srun_body = ("trap 'kill $nap; exit 138' USR1\n"
                 "sleep 30 >/dev/null 2>&1 & nap=$!\n"
                 f"touch {tmp_path}/srun.started\n"
                 "wait $nap\n")
    shell = subprocess.Popen(["bash", str(script)], cwd=tmp_path, text=True,
                             env=sbatch_env(tmp_path, srun_body), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not (tmp_path / "srun.started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    shell.send_signal(signal.SIGUSR1)
    _, stderr = shell.communicate(timeout=20)
    assert shell.returncode == 138, stderr
    assert recorded_calls(tmp_path / "scontrol.argv") == [["requeue", "4242"]]
    assert "requeueing" in stderr


def test_a_stop_by_scancel_is_not_requeued(tmp_path: Path) -> None:
    """SIGTERM (scancel, requeue, the time limit) reaches every process from Slurm; the
    shell waits for its child's checkpoint and requeues nothing itself."""
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(CPU, GRACE_S))
    srun_body = (f"touch {tmp_path}/srun.started\n"
                 f"while [ ! -e {tmp_path}/stop ]; do sleep 0.05; done\nexit 143\n")
    shell = subprocess.Popen(["bash", str(script)], cwd=tmp_path, text=True,
                             env=sbatch_env(tmp_path, srun_body), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not (tmp_path / "srun.started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    shell.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert shell.poll() is None  # still waiting for its child
    (tmp_path / "stop").touch()
    _, stderr = shell.communicate(timeout=20)
    assert shell.returncode == 143, stderr
    assert not (tmp_path / "scontrol.argv").exists()


def test_a_stop_that_reached_a_node_but_not_the_shell_is_requeued(tmp_path: Path) -> None:
    """A signal to one node's processes only (Slurm re-sending a lost node's terminate,
    a node's own stop): every node stops with a checkpoint (`fsdpspec run` exits
    128 + SIGTERM), Slurm itself requeues nothing, so the script does."""
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(CPU, GRACE_S))
    ran = subprocess.run(["bash", str(script)], cwd=tmp_path, text=True, capture_output=True,
                         env=sbatch_env(tmp_path, "exit 143\n"), timeout=30)
    assert ran.returncode == 143, ran.stderr
    assert recorded_calls(tmp_path / "scontrol.argv") == [["requeue", "4242"]]
    assert "fsdpspec: stopped by a signal to a node (exit 143); requeueing" in ran.stderr


def test_a_failed_run_is_not_requeued(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(CPU, GRACE_S))
    ran = subprocess.run(["bash", str(script)], cwd=tmp_path, text=True, capture_output=True,
                         env=sbatch_env(tmp_path, "exit 1\n"), timeout=30)
    assert ran.returncode == 1 and not (tmp_path / "scontrol.argv").exists()


@pytest.mark.parametrize(("records", "code", "requeued"), [
    ({"0": "1", "1": "143"}, 1, False),  # node 0 refused; srun stopped node 1
    ({"1": "143"}, 143, True),  # node 0 lost (nothing written), node 1 stopped
    ({"0": "143", "1": "143"}, 143, True),  # a signal to the nodes: both checkpointed
])
def test_a_node_that_failed_by_itself_is_not_requeued(
        tmp_path: Path, records: dict[str, str], code: int, requeued: bool) -> None:
    """srun stops every node when one exits non-zero (--kill-on-bad-exit) and reports
    the highest status, 143: the script reads each node's own `--exit-record`, so a
    refused multi-node job fails once instead of requeueing forever."""
    from fsdpspec_runners.local.rundir_setup import SCHEDULER_DIR

    exits = Path(MULTI.run_dir(), SCHEDULER_DIR, "exits-4242")
    body = "".join(f"echo {status} > {exits}/{node}\n" for node, status in records.items())
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(MULTI, GRACE_S))
    ran = subprocess.run(["bash", str(script)], cwd=tmp_path, text=True, capture_output=True,
                         env=sbatch_env(tmp_path, body + "exit 143\n"), timeout=30)
    assert ran.returncode == code, ran.stderr
    assert (tmp_path / "scontrol.argv").read_text().count("requeue") == int(requeued)
    if not requeued:
        assert "fsdpspec: node 0 failed (exit 1); srun stopped the others; not requeued" \
            in ran.stderr
