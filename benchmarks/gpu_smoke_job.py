"""The helper of benchmarks/gpu_smoke.sh: write one smoke run's resolved spec, then
compare what the run measured (the median tokens/s of its logged steps past warm-up,
its peak reserved memory) with what `fsdpspec plan` predicts for the same job.

    python benchmarks/gpu_smoke_job.py write RUN_DIR PRESET SEQ MICRO FLOAT8  # GPU count
    python benchmarks/gpu_smoke_job.py compare RUN_DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from fsdpspec.catalog.accelerators import CATALOG
from fsdpspec.job.job import resolve
from fsdpspec.plan.planner import plan_job
from fsdpspec.runfiles.resolved import read_resolved_job, write_resolved_spec
from fsdpspec.spec.v1 import JobSpec

GIB = 1 << 30


def accelerator_of(device_name: str) -> str | None:
    """The catalogue entry whose family appears in the device's name (H100, H200 …)."""
    return next((k for k in CATALOG if k.split("-")[0] in device_name), None)


def write(run_dir: Path, preset: str, seq: int, micro: int, float8: str) -> int:
    import torch

    ngpu = torch.cuda.device_count()
    accelerator = accelerator_of(torch.cuda.get_device_name(0))
    spec = JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "gpu-smoke"},
        "resources": {"gpus_per_node": ngpu, **({"accelerator": accelerator} if accelerator
                                                else {})},
        "model": {"preset": preset},
        "fsdp": {"mixed_precision": "bf16"},
        "float8": None if float8 == "off" else {"recipe": float8},
        "data": {"source": "synthetic", "seq_len": seq, "micro_batch_size": micro,
                 "global_batch_size": micro * ngpu},
        "optimizer": {"lr": 1e-4, "scheduler": {"name": "constant"}},
        "train": {"max_steps": 20},
        "checkpoint": {"interval_steps": 0, "final": {"enabled": False}},
        "logging": {"interval_steps": 5},
    })
    write_resolved_spec(spec, run_dir)
    return ngpu


def compare(run_dir: Path) -> str:
    job, _ = read_resolved_job(run_dir / "resolved-spec.json")
    plan = plan_job(resolve(job.spec, Path.cwd()))
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if "tokens_per_s" in m and m["step"] > 5]
    tokens = statistics.median(m["tokens_per_s"] for m in steps)
    reserved = max(m["peak_mem_reserved_gib"] for m in steps)
    planned_tokens = plan.step.tokens_per_s if plan.step else float("nan")
    planned = plan.device.peak_reserved / GIB
    recipe = job.spec.float8.recipe if job.spec.float8 else "bf16"
    return (f"gpu_smoke {job.spec.model.preset} {recipe}: tokens/s {tokens:,.0f} (plan "
            f"{planned_tokens:,.0f}, {planned_tokens / tokens - 1:+.1%}), peak reserved "
            f"{reserved:.2f} GiB (plan {planned:.2f}, {planned / reserved - 1:+.1%})")


if __name__ == "__main__":
    command, run = sys.argv[1], Path(sys.argv[2])
    if command == "write":
        print(write(run, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]))
    else:
        print(compare(run))
