"""Runner goldens: the torchrun argv (one node, several, CPU), the sbatch script (bash -n,
then run against stub `srun` and `scontrol` that record their argv) and the PyTorchJob
manifest. Regenerate the text goldens with FSDPSPEC_REGEN=1, then read them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML
from sbatch_stub import recorded, run_sbatch

from conftest import ROOT
from fsdpspec.spec.names import kubernetes_name
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.errors import LaunchError
from fsdpspec_runners.kubernetes import manifest, manifest_documents
from fsdpspec_runners.local.resolved import resolved_document
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

def test_sbatch_golden() -> None:
    check_golden("sbatch-multinode.sh", sbatch_script(MULTI, RUN_DIR))
    check_golden("sbatch-single.sh", sbatch_script(SINGLE, RUN_DIR))


@pytest.mark.parametrize("spec", [MULTI, SINGLE, CPU], ids=["multi", "single", "cpu"])
def test_sbatch_passes_bash_n(spec: JobSpec, tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(spec, RUN_DIR))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_sbatch_runs_one_torchrun_per_node_on_the_head_node(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "llama-sft"
    result = run_sbatch(sbatch_script(MULTI, run_dir), tmp_path)
    assert result.returncode == 0, result.stderr
    assert recorded(tmp_path / "scontrol.argv") == ["show", "hostnames", "gpu-node-[07-10]"]
    expected = build_torchrun_argv(MULTI, run_dir, rdzv_endpoint="gpu-node-07:29400")
    assert recorded(tmp_path / "srun.argv") == [
        "--nodes=4", "--ntasks-per-node=1", "--kill-on-bad-exit=1", *expected]
    written = json.loads((run_dir / "resolved-spec.json").read_text())
    assert written == resolved_document(MULTI, run_dir)


def test_schema_refuses_a_partition_that_would_break_out() -> None:
    with pytest.raises(ValidationError, match="partition"):
        job(launch={"slurm": {"partition": "gpu\ntouch pwned"}})


# ---- Kubernetes ---------------------------------------------------------------------------

def test_manifest_golden() -> None:
    check_golden("pytorchjob-multinode.yaml", manifest(MULTI))


def test_manifest_follows_the_training_operator_rules() -> None:
    config_map, job_doc = YAML(typ="safe").load_all(manifest(MULTI))
    assert job_doc["apiVersion"] == "kubeflow.org/v1" and job_doc["kind"] == "PyTorchJob"
    assert job_doc["metadata"] == {"name": "llama-sft", "namespace": "training",
                                   "labels": {"team": "nlp"}}
    assert job_doc["spec"]["nprocPerNode"] == "8"
    replicas = job_doc["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"}
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
    for replica in replicas.values():
        pod = replica["template"]["spec"]
        (container,) = pod["containers"]
        assert container["name"] == "pytorch"
        assert container["image"] == "ghcr.io/acme/fsdp:1"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert container["command"][:7] == [
            "torchrun", "--nnodes", "4", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "$(MASTER_ADDR):$(MASTER_PORT)"]
        assert container["command"][-4:] == [
            "-m", "fsdpspec_runners.engine", "--spec", "/etc/fsdpspec/resolved-spec.json"]
        assert pod["volumes"][0]["configMap"]["name"] == config_map["metadata"]["name"]
    spec_json = json.loads(config_map["data"]["resolved-spec.json"])
    assert spec_json["run_dir"] == "/workspace/runs/llama-sft"
    assert JobSpec.model_validate(spec_json["spec"]) == MULTI


def test_single_node_manifest_has_only_a_master() -> None:
    _, job_doc = manifest_documents(SINGLE.model_copy(update={"launch": MULTI.launch}))
    assert list(job_doc["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of command and env values: $$ is a literal $, $(VAR) is the
    variable when it is defined (and left as written when not)."""
    def one(match: re.Match) -> str:
        token = match.group(0)
        if token == "$$":
            return "$"
        return env.get(match.group(1), token)
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


def test_manifest_values_survive_kubernetes_expansion() -> None:
    tricky = "$(HOME) $$(HOME) $x $"
    spec = MULTI.model_copy(update={"launch": MULTI.launch.model_copy(
        update={"env": {"TRICKY": tricky}})})
    _, job_doc = manifest_documents(spec)
    container = job_doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"][0]
    env = {"HOME": "/root", "MASTER_ADDR": "master-0", "MASTER_PORT": "23456"}
    values = {e["name"]: kubelet_expand(e["value"], env) for e in container["env"]}
    assert values["TRICKY"] == tricky
    command = [kubelet_expand(word, env) for word in container["command"]]
    assert command[5:7] == ["--rdzv-endpoint", "master-0:23456"]  # the one meant reference


def test_manifest_needs_an_image() -> None:
    with pytest.raises(LaunchError, match="launch.kubernetes.image"):
        manifest(SINGLE)


@pytest.mark.parametrize(("name", "expected"), [
    ("llama-sft", "llama-sft"), ("Qwen2.5_7B", "qwen2-5-7b"), ("7b-run", "job-7b-run")])
def test_kubernetes_names(name: str, expected: str) -> None:
    assert kubernetes_name(name) == expected


def test_bash_is_available() -> None:
    assert shutil.which("bash"), "the sbatch tests need bash"
