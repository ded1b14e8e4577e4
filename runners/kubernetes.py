"""`fsdpspec export kubernetes`: a Kubeflow PyTorchJob (kubeflow.org/v1, the training
operator) or TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer 2) manifest.

Pure: JobSpec in, YAML text out. The manifest holds two documents: a ConfigMap with the
job spec, and the job whose pods mount it and run `fsdpspec run` on it, one per node, so
every pod gets the pre-flight checks, the same-job check, the lock, signal relay and
resume. The PyTorchJob follows the training operator's admission rules: a DNS-1035 job
name, exactly one Master replica, Workers only when there are more nodes, a container
named `pytorch` with an image in every replica, and a runPolicy. The TrainJob runs on
the `torch-distributed` ClusterTrainingRuntime: its trainer gives the image, command,
node count and resources, and a runtime patch adds the volumes to the runtime's `node`
container (the one the runtime gives the PET_* variables).

The run root is /workspace: the PersistentVolumeClaim ``launch.kubernetes.volume`` when
given, so checkpoints outlive the pods and every node shares the run directory. The
operator gives every pod MASTER_ADDR, MASTER_PORT and RANK (the pod's node rank: 0 for
the Master, 1… for the Workers), Trainer 2 PET_MASTER_ADDR, PET_MASTER_PORT and
PET_NODE_RANK; the command reads them as ``$(VAR)``, which Kubernetes expands. Nothing
from the spec reaches the command but the job's own name.
"""

from __future__ import annotations

import io
import json
from pathlib import PurePosixPath
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

from fsdpspec import __version__
from fsdpspec.spec.names import kubernetes_name
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.launch_error import LaunchError
from fsdpspec_runners.resources import node_cpus, node_memory_mib

RUN_ROOT = PurePosixPath("/workspace")
SPEC_MOUNT = PurePosixPath("/etc/fsdpspec")
JOB_FILE = "job.json"
CONTAINER = "pytorch"  # the name the operator looks for
TRAINJOB_RUNTIME = "torch-distributed"  # Trainer 2's ClusterTrainingRuntime for torch
TRAINJOB_CONTAINER = "node"  # the runtime's trainer container
# `--api`: the job kind, and the variables its controller gives each pod (node rank,
# rendezvous host and port).
APIS = ("pytorchjob", "trainjob")
_RENDEZVOUS_ENV = {"pytorchjob": ("RANK", "MASTER_ADDR", "MASTER_PORT"),
                   "trainjob": ("PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")}
_SPEC_VOLUME = "fsdpspec-spec"
_RUNS_VOLUME = "fsdpspec-runs"
# Containers get 64 MiB of /dev/shm; NCCL's intra-node transport needs far more.
_SHM = "dshm"




def _command(spec: JobSpec, api: str) -> list[str]:
    """`fsdpspec run` on the mounted spec; on several nodes, each pod's node rank and the
    first node's address from the controller."""
    command = ["fsdpspec", "run", str(SPEC_MOUNT / JOB_FILE)]
    if spec.resources.nodes > 1:
        rank, addr, port = _RENDEZVOUS_ENV[api]
        command += ["--nnodes", str(spec.resources.nodes), "--node-rank", f"$({rank})",
                    "--rdzv-endpoint", f"$({addr}):$({port})",
                    "--rdzv-id", kubernetes_name(spec.metadata.name)]
    return command


def _resources(spec: JobSpec) -> dict[str, Any]:
    """Requests equal to limits (Guaranteed QoS: the pod is the last to be evicted)."""
    amounts = {"cpu": str(node_cpus(spec)), "memory": f"{node_memory_mib(spec)}Mi"}
    if spec.device().is_gpu:
        amounts["nvidia.com/gpu"] = str(spec.resources.gpus_per_node)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _mounts(spec: JobSpec) -> list[dict[str, Any]]:
    mounts = [{"name": _SPEC_VOLUME, "mountPath": str(SPEC_MOUNT), "readOnly": True}]
    if spec.launch.kubernetes.volume:
        mounts.append({"name": _RUNS_VOLUME, "mountPath": str(RUN_ROOT)})
    if spec.device().is_gpu:
        mounts.append({"name": _SHM, "mountPath": "/dev/shm"})
    return mounts


def _container(spec: JobSpec, image: str) -> dict[str, Any]:
    return {"name": CONTAINER, "image": image, "workingDir": str(RUN_ROOT),
            "command": _command(spec, "pytorchjob"), "resources": _resources(spec),
            "volumeMounts": _mounts(spec)}


def _volumes(spec: JobSpec, config_map: str) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [{"name": _SPEC_VOLUME, "configMap": {"name": config_map}}]
    if spec.launch.kubernetes.volume:
        volumes.append({"name": _RUNS_VOLUME, "persistentVolumeClaim": {
            "claimName": spec.launch.kubernetes.volume}})
    if spec.device().is_gpu:
        volumes.append({"name": _SHM, "emptyDir": {"medium": "Memory"}})
    return volumes


def _replica(spec: JobSpec, image: str, replicas: int, config_map: str,
             grace_s: int) -> dict[str, Any]:
    return {
        "replicas": replicas,
        # A failed pod restarts in place and resumes; runPolicy.backoffLimit bounds it.
        "restartPolicy": "OnFailure",
        "template": {"spec": {"terminationGracePeriodSeconds": grace_s,
                              "containers": [_container(spec, image)],
                              "volumes": _volumes(spec, config_map)}},
    }


def _metadata(spec: JobSpec, name: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": spec.launch.kubernetes.namespace}
    if spec.metadata.labels:
        metadata["labels"] = dict(spec.metadata.labels)
    return metadata


def manifest_warnings(spec: JobSpec, api: str = "pytorchjob") -> list[str]:
    """What the manifest cannot promise, one line each."""
    warnings = []
    if spec.resources.nodes > 1 and not spec.launch.kubernetes.volume:
        warnings.append("a multi-node job without launch.kubernetes.volume: the pods share "
                        "no run directory, so the workers wait for a resolved-spec.json "
                        "that never appears, and checkpoints die with the pods")
    if api == "trainjob" and spec.launch.max_restarts:
        warnings.append(f"launch.max_restarts {spec.launch.max_restarts} is not carried: a "
                        "TrainJob has no restart count; the runtime "
                        f"{TRAINJOB_RUNTIME}'s failure policy decides (export --api "
                        "pytorchjob sets runPolicy.backoffLimit)")
    return warnings


def _config_map(spec: JobSpec, name: str) -> dict[str, Any]:
    document = json.dumps(spec.as_written(), indent=2) + "\n"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(spec, name),
            "data": {JOB_FILE: LiteralScalarString(document)}}


def _image(spec: JobSpec, kind: str) -> str:
    image = spec.launch.kubernetes.image
    if not image:
        raise LaunchError(f"launch.kubernetes.image is required for a {kind} "
                          "(an image with fsdpspec[train] installed)")
    return image


def _pytorchjob(spec: JobSpec, name: str, config_map: str, grace_s: int) -> dict[str, Any]:
    image = _image(spec, "PyTorchJob")
    replicas = {"Master": _replica(spec, image, 1, config_map, grace_s)}
    if spec.resources.nodes > 1:
        replicas["Worker"] = _replica(spec, image, spec.resources.nodes - 1, config_map,
                                      grace_s)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": _metadata(spec, name),
            "spec": {"nprocPerNode": str(spec.resources.gpus_per_node),
                     "runPolicy": {"backoffLimit": spec.launch.max_restarts},
                     "pytorchReplicaSpecs": replicas}}


def _trainjob(spec: JobSpec, name: str, config_map: str, grace_s: int) -> dict[str, Any]:
    """The TrainJob: its trainer (image, command, nodes, processes, resources), and a
    runtime patch that gives the runtime's node pods the volumes, the working directory's
    claim and the grace period (a patch may not set the image or command)."""
    image = _image(spec, "TrainJob")
    pod = {"terminationGracePeriodSeconds": grace_s,
           "containers": [{"name": TRAINJOB_CONTAINER, "volumeMounts": _mounts(spec)}],
           "volumes": _volumes(spec, config_map)}
    patch = {"manager": "fsdpspec", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": TRAINJOB_CONTAINER,
                            "template": {"spec": {"template": {"spec": pod}}}}]}}}}
    command = _command(spec, "trainjob")
    # The trainer has no working directory: the command changes to the run root first.
    shell = ["sh", "-c", f'cd {RUN_ROOT} && exec "$@"', "sh", *command]
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": _metadata(spec, name),
            "spec": {"runtimeRef": {"name": TRAINJOB_RUNTIME},
                     "trainer": {"image": image, "command": shell,
                                 "numNodes": spec.resources.nodes,
                                 "numProcPerNode": spec.resources.gpus_per_node,
                                 "resourcesPerNode": _resources(spec)},
                     "runtimePatches": [patch]}}


def manifest_documents(spec: JobSpec, grace_s: int,
                       api: str = "pytorchjob") -> list[dict[str, Any]]:
    """The ConfigMap and the PyTorchJob (or, ``api`` "trainjob", the TrainJob), as plain
    data. ``grace_s``: the pods' terminationGracePeriodSeconds (the planned checkpoint
    time)."""
    name = kubernetes_name(spec.metadata.name)
    config_map = f"{name}-spec"
    build = _trainjob if api == "trainjob" else _pytorchjob
    return [_config_map(spec, config_map), build(spec, name, config_map, grace_s)]


_NEEDS = {"pytorchjob": "the Kubeflow training operator v1.7+",
          "trainjob": f"Kubeflow Trainer v2.3+ and its {TRAINJOB_RUNTIME} "
                      "ClusterTrainingRuntime"}


def manifest(spec: JobSpec, grace_s: int, api: str = "pytorchjob") -> str:
    """The manifest as YAML text, ready for `kubectl apply -f`."""
    yaml = YAML()  # round-trip dumper: keys in written order, the JSON as a block
    yaml.width = 4096
    stream = io.StringIO()
    storage = (f"the PersistentVolumeClaim {spec.launch.kubernetes.volume}"
               if spec.launch.kubernetes.volume else "the pod's own disk (lost with it)")
    stream.write(f"# Generated by fsdpspec {__version__} for job {spec.metadata.name}. "
                 "Apply with: kubectl apply -f THIS_FILE\n"
                 f"# Needs {_NEEDS[api]}. The run directory is "
                 f"under {RUN_ROOT}, on {storage}; input paths must exist in the image.\n")
    yaml.dump_all(manifest_documents(spec, grace_s, api), stream)
    return stream.getvalue()
