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
