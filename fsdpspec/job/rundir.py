"""The names inside a run directory: one home for every package that reads or writes
them (the launcher, the engine, `status`, `report`, the charts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RESOLVED_SPEC = "resolved-spec.json"
METRICS = "metrics.jsonl"
EVENTS = "events.jsonl"
CHECKPOINTS = "checkpoints"
# checkpoints/latest names the newest complete checkpoint.
LATEST = "latest"
FINAL = "final"
# checkpoints/step-00000012: the checkpoint written after step 12.
STEP_PREFIX = "step-"
FULL_FILE = "full_state_dict.pt"
# The file whose presence makes a checkpoint complete, per state dict type.
ENTRY_FILES = (".metadata", FULL_FILE)
# A LoRA export's adapter, in peft's format, inside final/ (or an `export hf` target).
ADAPTER = "adapter"
ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class RunDir:
    """The paths of one run directory."""

    root: Path

    @property
    def resolved_spec(self) -> Path:
        return self.root / RESOLVED_SPEC

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    @property
    def events(self) -> Path:
        return self.root / EVENTS

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def latest(self) -> Path:
        return self.checkpoints / LATEST

    @property
    def final(self) -> Path:
        return self.root / FINAL


def step_dir_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:08d}"


def is_complete(path: Path) -> bool:
    """A checkpoint is complete once DCP's metadata (or the full state dict file) is
    inside its final name."""
    return path.name.startswith(STEP_PREFIX) and any(
        (path / name).is_file() for name in ENTRY_FILES)


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = RunDir(run_dir).checkpoints
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and is_complete(p))
