"""Names derived from `metadata.name` for the systems that run a job."""

from __future__ import annotations

import re

_MAX_LABEL = 63


def kubernetes_name(name: str) -> str:
    """``name`` as a Kubernetes object name (an RFC 1035 label: lowercase letters, digits
    and '-', starting with a letter, ending with a letter or digit, at most 63 chars)."""
    label = re.sub(r"[^a-z0-9-]", "-", name.lower())
    if not label[:1].isalpha():
        label = "job-" + label
    return label[:_MAX_LABEL].rstrip("-")
