"""A run directory's resolved-spec.json edited as an attacker who knows the format would:
the spec changed and the recorded job resolved anew for it, so the record agrees with
its spec (FS041 passes) and only the checkpoint can tell the lie."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fsdpspec.runfiles.resolved import FILENAME, resolved_document
from fsdpspec.spec.v1 import JobSpec


def relabel(run_dir: Path, peft: dict[str, Any] | None) -> Path:
    """Rewrite ``run_dir``'s resolved spec with ``peft`` as its `peft` section, its
    identity and job record derived again; the path of the file written."""
    path = run_dir / FILENAME
    document = json.loads(path.read_text())
    spec = JobSpec.model_validate({**document["spec"], "peft": peft})
    path.write_text(json.dumps(resolved_document(spec, run_dir), indent=2))
    return path
