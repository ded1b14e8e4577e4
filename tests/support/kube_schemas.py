"""The pinned Kubeflow CRD schemas (tests/runners/schemas/README.md) as validators that
judge a manifest as `kubectl apply` does by default (field validation Strict): a field
the schema does not name is an error, not silently pruned."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

SCHEMAS = Path(__file__).parents[1] / "runners" / "schemas"
CRDS = {"PyTorchJob": "kubeflow.org_pytorchjobs.json",
        "TrainJob": "trainer.kubeflow.org_trainjobs.json"}
# The Kubernetes release whose schema the pod templates are checked against.
KUBERNETES = "1.33"


def _strict(node: Any) -> Any:
    """The schema with unknown fields refused where the API server refuses them: an
    object that lists its properties and neither preserves unknown fields nor allows
    additional ones."""
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@cache
def crd_validator(kind: str) -> jsonschema.Draft202012Validator:
    document = json.loads((SCHEMAS / CRDS[kind]).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(_strict(document["openAPIV3Schema"]))


def crd_errors(job: dict[str, Any]) -> list[str]:
    """Every way ``job`` breaks its kind's CRD schema (empty: it is accepted)."""
    found = crd_validator(job["kind"]).iter_errors(job)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


def check_pod_template(template: dict[str, Any]) -> None:
    """Raise kubernetes_validate.ValidationError unless ``template`` is a valid
    PodTemplateSpec of Kubernetes (strict: no unknown fields)."""
    document = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "pod"},
                "template": copy.deepcopy(template)}
    kubernetes_validate.validate(document, KUBERNETES, strict=True)


def check_resource(document: dict[str, Any]) -> None:
    """A built-in resource (the ConfigMap) against Kubernetes' schema."""
    kubernetes_validate.validate(document, KUBERNETES, strict=True)
