"""The exported PyTorchJob against the Kubeflow training SDK's models (kubeflow.org/v1),
the training operator's CRD schema and Kubernetes' pod schema, and what the manifest asks
of the cluster: storage, resources, restarts, grace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_schemas import check_pod_template, check_resource, crd_errors
from kubeflow.training import ApiClient
from ruamel.yaml import YAML

from conftest import ROOT, run_cli

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
IMAGE = ["--set", "launch.kubernetes.image=ghcr.io/acme/fsdp:1"]


def export(path: Path, *extra: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The ConfigMap, the PyTorchJob and the export's stderr."""
    result = run_cli("export", "kubernetes", str(path), *IMAGE, *extra)
    assert result.returncode == 0, result.stderr
    config_map, job = YAML(typ="safe").load_all(result.stdout)
    return config_map, job, result.stderr


def sdk_round_trip(job: dict[str, Any]) -> dict[str, Any]:
    """The manifest read into the SDK's KubeflowOrgV1PyTorchJob and written back: a field
    the models do not know, or a value of the wrong type, does not come back as it was."""
    client = ApiClient()
    model = client._ApiClient__deserialize(job, "KubeflowOrgV1PyTorchJob")
    return client.sanitize_for_serialization(model)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_validates_against_the_sdk_models_and_the_schemas(path: Path) -> None:
    config_map, job, _ = export(path, "--set", "launch.kubernetes.volume=runs-pvc")
    assert sdk_round_trip(job) == job
    assert job["spec"]["runPolicy"]["backoffLimit"] >= 0  # the CRD's runPolicy is present
    assert crd_errors(job) == []  # the PyTorchJob CRD of training-operator v1.9.0
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        check_pod_template(replica["template"])
    check_resource(config_map)


def test_the_round_trip_catches_a_misplaced_field() -> None:
    _, job, _ = export(EXAMPLES[0])
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "volumeMount"] = []
    assert sdk_round_trip(job) != job


def test_the_run_root_is_the_claim_on_every_pod() -> None:
    _, job, stderr = export(ROOT / "examples" / "llama3-70b-multinode.yaml",
                            "--set", "launch.kubernetes.volume=runs-pvc")
    assert "warning" not in stderr
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        (container,) = pod["containers"]
        assert {"name": "fsdpspec-runs", "mountPath": "/workspace"} in container["volumeMounts"]
        assert container["workingDir"] == "/workspace"
        assert {"name": "fsdpspec-runs",
                "persistentVolumeClaim": {"claimName": "runs-pvc"}} in pod["volumes"]


def test_a_multi_node_job_without_a_volume_is_warned() -> None:
    _, job, stderr = export(ROOT / "examples" / "llama3-70b-multinode.yaml")
    assert "warning: a multi-node job without launch.kubernetes.volume" in stderr
    assert len(stderr.strip().splitlines()) == 1
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["fsdpspec-spec", "dshm"]


def test_requests_and_limits_come_from_the_spec() -> None:
    _, job, _ = export(ROOT / "examples" / "llama3-70b-multinode.yaml",
                       "--set", "resources.cpus_per_node=96",
                       "--set", "resources.host_memory_gib=1536")
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"][0]
    amounts = {"cpu": "96", "memory": f"{1536 * 1024}Mi", "nvidia.com/gpu": "8"}
    assert container["resources"] == {"requests": amounts, "limits": amounts}


def test_cpu_job_asks_for_no_gpu_and_one_core_per_process() -> None:
    _, job, _ = export(ROOT / "examples" / "quickstart.yaml")
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "8192Mi"}
    assert pod["terminationGracePeriodSeconds"] == 60  # the floor: a tiny checkpoint


def test_restarts_and_grace_come_from_the_plan() -> None:
    _, job, _ = export(ROOT / "examples" / "llama3-8b-h100.yaml",
                       "--set", "launch.max_restarts=3")
    assert job["spec"]["runPolicy"] == {"backoffLimit": 3}
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        assert replica["restartPolicy"] == "OnFailure"
        # 8.03e9 parameters × 4 bytes × (1 + 2 AdamW states) at 1 GiB/s, doubled.
        assert replica["template"]["spec"]["terminationGracePeriodSeconds"] == 180


def test_no_image_is_one_clear_line() -> None:
    result = run_cli("export", "kubernetes", str(ROOT / "examples" / "quickstart.yaml"))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "Error: launch.kubernetes.image is required for a PyTorchJob (an image with "
        "fsdpspec[train] installed)"]
