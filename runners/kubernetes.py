"""`fsdpspec export kubernetes`: a Kubeflow PyTorchJob (kubeflow.org/v1) manifest.

Pure: JobSpec in, YAML text out. The manifest holds two documents: a ConfigMap with
the resolved spec, and the PyTorchJob whose pods mount it and run the same torchrun
argv as `fsdpspec run`. It follows the training operator's admission rules: a
DNS-1035 job name, exactly one Master replica, Workers only when there are more nodes,
a container named `pytorch` with an image in every replica.

The operator gives every pod MASTER_ADDR and MASTER_PORT (the Master pod's service);
the argv's rendezvous endpoint is ``$(MASTER_ADDR):$(MASTER_PORT)``, which Kubernetes
expands. Spec values are escaped (``$`` → ``$$``) so Kubernetes expands none of theirs.
"""

from __future__ import annotations

import io
import json
from pathlib import Path, PurePosixPath
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

from fsdpspec import __version__
from fsdpspec.spec.names import kubernetes_name
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.errors import LaunchError
from fsdpspec_runners.local.resolved import FILENAME, resolved_document
from fsdpspec_runners.torchrun import build_torchrun_argv, spec_env

WORKDIR = PurePosixPath("/workspace")
SPEC_MOUNT = PurePosixPath("/etc/fsdpspec")
CONTAINER = "pytorch"  # the name the operator looks for
_VOLUME = "fsdpspec-spec"
# Containers get 64 MiB of /dev/shm; NCCL's intra-node transport needs far more.
_SHM = "dshm"
_OPERATOR_ENDPOINT = "$(MASTER_ADDR):$(MASTER_PORT)"


def _no_expansion(value: str) -> str:
    # Kubernetes expands $(VAR) in command and env values and reads $$ as one $:
    # doubling every $ gives back the spec's text exactly.
    return value.replace("$", "$$")


def container_run_dir(spec: JobSpec) -> PurePosixPath:
    """The run directory inside the container (relative dirs live under /workspace)."""
    return WORKDIR / spec.run_dir()


def _command(spec: JobSpec) -> list[str]:
    """The torchrun argv, reading the mounted resolved spec (which names the run dir)."""
    argv = build_torchrun_argv(spec, container_run_dir(spec), rdzv_endpoint="operator")
    argv[-1] = str(SPEC_MOUNT / FILENAME)
    command = [_no_expansion(arg) for arg in argv]
    if "--rdzv-endpoint" in argv:
        command[argv.index("--rdzv-endpoint") + 1] = _OPERATOR_ENDPOINT
    return command


def _container(spec: JobSpec, image: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "workingDir": str(WORKDIR),
        "command": _command(spec),
    }
    env = spec_env(spec)
    if env:
        container["env"] = [{"name": k, "value": _no_expansion(v)} for k, v in env.items()]
    if spec.device().is_gpu:
        container["resources"] = {"limits": {"nvidia.com/gpu": spec.resources.gpus_per_node}}
    container["volumeMounts"] = [{"name": _VOLUME, "mountPath": str(SPEC_MOUNT),
                                  "readOnly": True}]
    if spec.device().is_gpu:
        container["volumeMounts"].append({"name": _SHM, "mountPath": "/dev/shm"})
    return container


def _replica(spec: JobSpec, image: str, replicas: int, config_map: str) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": _VOLUME, "configMap": {"name": config_map}}]
    if spec.device().is_gpu:
        volumes.append({"name": _SHM, "emptyDir": {"medium": "Memory"}})
    return {
        "replicas": replicas,
        "restartPolicy": "Never",  # torchrun's --max-restarts decides restarts
        "template": {"spec": {"containers": [_container(spec, image)], "volumes": volumes}},
    }


def _metadata(spec: JobSpec, name: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": spec.launch.kubernetes.namespace}
    if spec.metadata.labels:
        metadata["labels"] = dict(spec.metadata.labels)
    return metadata


def manifest_documents(spec: JobSpec) -> list[dict[str, Any]]:
    """The ConfigMap and the PyTorchJob, as plain data."""
    image = spec.launch.kubernetes.image
    if not image:
        raise LaunchError("launch.kubernetes.image is required for a PyTorchJob "
                          "(an image with fsdpspec[train] installed)")
    name = kubernetes_name(spec.metadata.name)
    config_map = f"{name}-spec"
    document = resolved_document(spec, Path(container_run_dir(spec)))
    document["run_dir"] = str(container_run_dir(spec))  # a container path, not this host's
    replicas = {"Master": _replica(spec, image, 1, config_map)}
    if spec.resources.nodes > 1:
        replicas["Worker"] = _replica(spec, image, spec.resources.nodes - 1, config_map)
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(spec, config_map),
         "data": {FILENAME: LiteralScalarString(json.dumps(document, indent=2) + "\n")}},
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
         "metadata": _metadata(spec, name),
         "spec": {"nprocPerNode": str(spec.resources.gpus_per_node),
                  "pytorchReplicaSpecs": replicas}},
    ]


def manifest(spec: JobSpec) -> str:
    """The manifest as YAML text, ready for `kubectl apply -f`."""
    yaml = YAML()  # round-trip dumper: keys in written order, the JSON as a block
    yaml.width = 4096
    stream = io.StringIO()
    stream.write(f"# Generated by fsdpspec {__version__} for job {spec.metadata.name}. "
                 "Apply with: kubectl apply -f THIS_FILE\n"
                 "# Needs the Kubeflow training operator v1.7+. Mount shared storage at "
                 f"{WORKDIR} to keep checkpoints; input paths must exist in the image.\n")
    yaml.dump_all(manifest_documents(spec), stream)
    return stream.getvalue()
