"""GPU check of context parallelism: one long-sequence job split over every visible GPU
with ring attention (`parallelism.context_parallel`), trained through `fsdpspec run`,
its measured peak memory and tokens/s printed beside what `fsdpspec plan` predicts.

Needs 2 or more CUDA GPUs (NCCL takes one rank a device, and a ring needs two ranks);
with fewer it says so and exits 0. `benchmarks/gpu_smoke.sh` runs it after its FSDP run.

    python benchmarks/gpu_smoke_cp.py [--preset llama3.2-1b] [--seq-len 32768] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu_smoke_job import accelerator_of

from fsdpspec.job.job import resolve
from fsdpspec.plan.memory import GIB
from fsdpspec.plan.planner import plan_job
from fsdpspec.spec.v1 import JobSpec

ROOT = Path(__file__).resolve().parent.parent


def _gpus() -> tuple[int, str]:
    import torch

    if not torch.cuda.is_available():
        return 0, ""
    return torch.cuda.device_count(), torch.cuda.get_device_name(0)


def job_spec(*, gpus: int, device: str, preset: str, seq_len: int, steps: int,
             run_dir: Path) -> dict:
    """Every GPU one context-parallel group (the largest power of two that fits), one
    sequence a step, full checkpointing, as torchtitan's CP table runs."""
    cp = 1 << (gpus.bit_length() - 1)
    accelerator = accelerator_of(device)
    return {
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "gpu-smoke-cp"},
        "resources": {"gpus_per_node": cp, **({"accelerator": accelerator} if accelerator else {})},
        "model": {"preset": preset, "attention": "sdpa"},
        "parallelism": {"context_parallel": cp},
        "fsdp": {"mixed_precision": "bf16", "activation_checkpointing": "full"},
        "data": {"source": "synthetic", "seq_len": seq_len, "micro_batch_size": 1,
                 "global_batch_size": 1},
        "optimizer": {"lr": 1e-4, "scheduler": {"name": "constant"}},
        "train": {"max_steps": steps},
        "checkpoint": {"dir": f"{run_dir}/{{name}}", "interval_steps": 0,
                       "final": {"enabled": False}},
        "logging": {"interval_steps": max(1, steps // 2)},
    }


def compare(spec: dict, run_dir: Path) -> str:
    """The last logged step against the plan: peak reserved and tokens/s per GPU."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    last = [r for r in records if "tokens_per_s" in r][-1]
    plan = plan_job(resolve(JobSpec.model_validate(spec), ROOT))
    gpus = plan.job.layout.world_size
    measured_rate = last["tokens_per_s"] / gpus
    planned_reserved = plan.device.peak_reserved / GIB
    line = (f"gpu_smoke cp {plan.job.layout.dims.cp} × seq {plan.job.batch.seq}: peak reserved "
            f"{last['peak_mem_reserved_gib']:.2f} GiB (plan {planned_reserved:.2f}, "
            f"{last['peak_mem_reserved_gib'] / planned_reserved - 1:+.1%})")
    if plan.step is not None:
        line += (f"; tokens/s per GPU {measured_rate:,.0f} (plan {plan.step.tokens_per_s:,.0f}, "
                 f"{measured_rate / plan.step.tokens_per_s - 1:+.1%})")
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="llama3.2-1b")
    parser.add_argument("--seq-len", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    gpus, device = _gpus()
    if gpus < 2:
        print(f"gpu_smoke cp: {gpus} CUDA GPU(s) visible, a ring needs 2; skipped")
        return 0
    with tempfile.TemporaryDirectory(prefix="fsdpspec-gpu-smoke-cp.") as tmp:
        spec = job_spec(gpus=gpus, device=device, preset=args.preset, seq_len=args.seq_len,
                        steps=args.steps, run_dir=Path(tmp))
        run_dir = Path(JobSpec.model_validate(spec).run_dir())
        job = Path(tmp) / "job.yaml"
        job.write_text(json.dumps(spec))  # JSON is YAML
        done = subprocess.run([sys.executable, "-m", "fsdpspec", "run", str(job)], cwd=ROOT,
                              check=False)
        if done.returncode:
            print(f"gpu_smoke cp: fsdpspec run exited {done.returncode}")
            return done.returncode
        print(compare(spec, run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
