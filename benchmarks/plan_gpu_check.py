"""The plan against a real GPU: peak allocated and peak reserved, row by row.

Runs the matrix of benchmarks/plan_accuracy.py with real CUDA tensors on one GPU and a
fake process group of the shard-group size: every allocation one rank makes is real,
only the collectives are skipped. Two optimizer steps per row; the second is measured
with ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` and compared with the
plan's ``peak_allocated`` and ``peak_reserved`` (the CUDA context and NCCL buffers sit
outside the allocator, so neither side counts them). Without a GPU it says so and
exits 0. The rows include the newer dense and Mixture-of-Experts families (the MoE rows
run in bf16, which transformers' grouped expert matmul needs on a GPU).

    python benchmarks/plan_gpu_check.py [--rows N] [--match mixtral]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
from pathlib import Path

from plan_accuracy import ROWS, row_spec

from fsdpspec.job.job import resolve
from fsdpspec.plan.planner import plan_job

GIB = 1 << 30


def measure(row: tuple, torch) -> tuple[int, int, int, int]:
    """(plan allocated, plan reserved, measured allocated, measured reserved) of a row."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from fsdpspec_runners.engine.mesh import shard_group_mesh
    from fsdpspec_runners.engine.model_build import build_model
    from fsdpspec_runners.engine.trace import shard_job, train_step

    job = resolve(row_spec(row), Path.cwd())
    plan = plan_job(job)
    shard = plan.job.layout.shard_size
    dist.init_process_group("fake", rank=0, world_size=shard, store=FakeStore())
    try:
        cuda = torch.device("cuda")
        mesh = shard_group_mesh("cuda", shard)
        model = build_model(job, on_meta=True)
        optimizer = shard_job(job, model, mesh, cuda)
        train_step(job, model, optimizer, cuda)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        train_step(job, model, optimizer, cuda)
        torch.cuda.synchronize()
        measured = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
        del model, optimizer
    finally:
        dist.destroy_process_group()
        gc.collect()
        torch.cuda.empty_cache()
    return plan.device.peak_allocated, plan.device.peak_reserved, *measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=len(ROWS), help="run the first N rows")
    parser.add_argument("--match", default="", help="only rows whose name contains this")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed: nothing to check (exit 0)")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: skipping the GPU check (exit 0)")
        return 0
    print(f"{torch.cuda.get_device_name()}: plan vs measured, GiB per rank")
    print(f"{'row':<28}{'alloc plan':>11}{'measured':>10}{'err':>8}"
          f"{'reserved plan':>15}{'measured':>10}{'err':>8}")
    alloc_errors, reserved_errors = [], []
    for row in [r for r in ROWS[: args.rows] if args.match in r[0]]:
        plan_alloc, plan_reserved, alloc, reserved = measure(row, torch)
        alloc_errors.append(abs(plan_alloc - alloc) / alloc)
        reserved_errors.append(abs(plan_reserved - reserved) / reserved)
        print(f"{row[0]:<28}{plan_alloc / GIB:>11.2f}{alloc / GIB:>10.2f}"
              f"{100 * (plan_alloc - alloc) / alloc:>+7.1f}%{plan_reserved / GIB:>15.2f}"
              f"{reserved / GIB:>10.2f}{100 * (plan_reserved - reserved) / reserved:>+7.1f}%",
              flush=True)
    print(f"allocated: median |error| {100 * statistics.median(alloc_errors):.1f}%, max "
          f"{100 * max(alloc_errors):.1f}%; reserved: median "
          f"{100 * statistics.median(reserved_errors):.1f}%, max {100 * max(reserved_errors):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
