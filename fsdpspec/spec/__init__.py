"""Versioned job-spec models; `SUPPORTED` maps apiVersion to its root model."""

from fsdpspec.spec.v1 import API_VERSION as V1
from fsdpspec.spec.v1 import JobSpec

SUPPORTED = {V1: JobSpec}
LATEST = V1

__all__ = ["SUPPORTED", "LATEST", "JobSpec"]
