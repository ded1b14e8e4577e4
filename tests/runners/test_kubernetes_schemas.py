"""`fsdpspec export kubernetes` against the real schemas (issue 33): the PyTorchJob and the
Kubeflow Trainer 2 TrainJob (`--api trainjob`) against their pinned CRDs
(tests/runners/schemas/), as `kubectl apply` validates them; the pod templates against
Kubernetes' own schema. (Every example's PyTorchJob: test_kubernetes_manifest.py.)"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from click.testing import CliRunner
from kube_schemas import check_pod_template, check_resource, crd_errors
from ruamel.yaml import YAML

from conftest import ROOT, run_cli
from fsdpspec.cli.main import cli

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
MULTINODE = ROOT / "examples" / "llama3-70b-multinode.yaml"
SETS = ["--set", "launch.kubernetes.image=ghcr.io/acme/fsdp:1",
        "--set", "launch.kubernetes.volume=runs-pvc"]


def _documents(text: str) -> list[dict[str, Any]]:
    return list(YAML(typ="safe").load_all(text))


@pytest.fixture(scope="module")
def multinode(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, str]]:
    """API → `fsdpspec export kubernetes FILE --api API -o job.k8s.yaml` of the multi-node
    example, as docs/clusters.md shows it: the run and the manifest it wrote."""
    exports = {}
    for api in ("trainjob", "pytorchjob"):
        target = tmp_path_factory.mktemp(api) / "job.k8s.yaml"
        result = run_cli("export", "kubernetes", str(MULTINODE), "--api", api, *SETS,
                         "-o", str(target))
        exports[api] = (result, target.read_text(encoding="utf-8") if target.exists() else "")
    return exports


def test_every_example_exports_a_trainjob_its_crd_accepts() -> None:
    runner = CliRunner()
    for path in EXAMPLES:  # in-process: the same command, without a Python start each
        result = runner.invoke(cli, ["export", "kubernetes", str(path), "--api", "trainjob",
                                     *SETS])
        assert result.exit_code == 0, (path, result.output)
        config_map, job = _documents(result.stdout)
        assert job["kind"] == "TrainJob" and crd_errors(job) == [], path
        check_resource(config_map)
        trainer = job["spec"]["trainer"]
        assert trainer["image"] == "ghcr.io/acme/fsdp:1"
        assert job["spec"]["runtimeRef"] == {"name": "torch-distributed"}


def test_the_multi_node_trainjob_rendezvouses_on_the_runtime_variables(multinode) -> None:
    result, manifest = multinode["trainjob"]
    assert result.returncode == 0, result.stderr
    assert "Kubeflow Trainer v2.3+" in manifest.splitlines()[1]
    config_map, job = _documents(manifest)
    assert crd_errors(job) == []
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 8 and trainer["numProcPerNode"] == 8
    command = trainer["command"]
    assert command[:4] == ["sh", "-c", 'cd /workspace && exec "$@"', "sh"]
    assert command[4:] == ["fsdpspec", "run", "/etc/fsdpspec/job.json", "--nnodes", "8",
                           "--node-rank", "$(PET_NODE_RANK)", "--rdzv-endpoint",
                           "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)", "--rdzv-id",
                           "llama3-70b-pretrain"]
    (patch,) = job["spec"]["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    assert node["name"] == "node" and pod["containers"][0]["name"] == "node"
    assert {"name": "fsdpspec-runs", "mountPath": "/workspace"} in \
        pod["containers"][0]["volumeMounts"]
    assert {"name": "fsdpspec-spec", "configMap": {"name": config_map["metadata"]["name"]}} \
        in pod["volumes"]
    # The example restarts 3 times: a TrainJob cannot say so, and the export says that.
    assert "launch.max_restarts 3 is not carried" in result.stderr


def test_the_multi_node_pytorchjob_meets_its_crd_and_the_pod_schema(multinode) -> None:
    result, manifest = multinode["pytorchjob"]
    assert result.returncode == 0, result.stderr
    _, job = _documents(manifest)
    assert crd_errors(job) == [] and set(job["spec"]["pytorchReplicaSpecs"]) == {
        "Master", "Worker"}
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        check_pod_template(replica["template"])


def test_the_schemas_catch_what_a_cluster_refuses(multinode) -> None:
    _, job = _documents(multinode["trainjob"][1])
    job["spec"]["trainer"]["numProcPerNode"] = "8"  # a string where the CRD wants int32
    job["spec"]["trainer"]["workingDir"] = "/workspace"  # no such trainer field
    assert len(crd_errors(job)) == 2
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x", "volumeMount": []}]}}
    with pytest.raises(kubernetes_validate.ValidationError, match="volumeMount"):
        check_pod_template(template)


def test_api_is_refused_for_other_targets() -> None:
    result = run_cli("export", "slurm", str(MULTINODE), "--api", "trainjob")
    assert result.returncode == 2 and "--api applies to export kubernetes only" in result.stderr
