"""What this machine's processes reach while all of them run at once: matmul rate at the
job's layer shapes (in the compute dtype and in float32), memory bandwidth (a large
copy) and collective bandwidth (all-gather over gloo on CPU, NCCL on GPUs), each timed
for a fraction of a second: in wall time on GPUs, in the process's CPU time on a CPU.
Every rank measures; the slowest sets the step's pace, so rank 0 writes the minimum of
each as JSON. `fsdpspec tune --measure` starts it with
torchrun and turns it into an accelerator.

    torchrun --nproc-per-node 2 -m fsdpspec_runners.engine.calibrate --out cal.json \\
        --tokens 1024 --hidden 512 --intermediate 1376 --dtype float32
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from fsdpspec.atomicio import write_text

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Each measurement repeats its operation for about this long.
_SECONDS = 0.4
_COPY_BYTES = 64 << 20
_GATHER_BYTES = 8 << 20


def _clock(device: torch.device) -> Callable[[], float]:
    """Wall time on a GPU; on a CPU this process's CPU time, the currency `tune
    --measure` compares in there (a shared machine's load does not change it)."""
    return time.perf_counter if device.type == "cuda" else time.process_time


def _timed(op: Callable[[], None], device: torch.device) -> float:
    """Seconds per call of ``op``, over repeats filling about _SECONDS (one warm-up)."""
    clock = _clock(device)
    op()
    _sync(device)
    calls, start = 0, clock()
    while True:
        op()
        calls += 1
        _sync(device)
        elapsed = clock() - start
        if elapsed >= _SECONDS:
            return elapsed / calls


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(tokens: int, hidden: int, intermediate: int, dtype: torch.dtype,
                  device: torch.device) -> float:
    """TFLOP/s of the (tokens × hidden) @ (hidden × intermediate) product."""
    a = torch.randn(tokens, hidden, dtype=dtype, device=device)
    b = torch.randn(hidden, intermediate, dtype=dtype, device=device)
    seconds = _timed(lambda: torch.mm(a, b), device)
    return 2 * tokens * hidden * intermediate / seconds / 1e12


def memory_gbps(device: torch.device) -> float:
    """GB/s of a large copy (read plus write)."""
    src = torch.empty(_COPY_BYTES // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _timed(lambda: dst.copy_(src), device)
    return 2 * _COPY_BYTES / seconds / 1e9


def collective_gbps(device: torch.device) -> float:
    """GB/s each rank moves in an all-gather ((n-1)/n of the output, as the planner
    counts a ring collective). Every rank must make the same number of calls, so the
    count is agreed (the smallest any rank asks for) before the timed ones."""
    world = dist.get_world_size()
    shard = torch.ones(_GATHER_BYTES // 4, dtype=torch.float32, device=device)
    out = torch.empty(world * shard.numel(), dtype=torch.float32, device=device)

    def gather() -> None:
        dist.all_gather_single(out, shard)

    clock = _clock(device)
    gather()
    _sync(device)
    start = clock()
    gather()
    _sync(device)
    once = clock() - start
    calls = torch.tensor([max(1, int(_SECONDS / max(once, 1e-6)))], device=device)
    dist.all_reduce(calls, op=dist.ReduceOp.MIN)
    start = clock()
    for _ in range(int(calls.item())):
        gather()
    _sync(device)
    seconds = max(clock() - start, 1e-9) / int(calls.item())
    return (world - 1) / world * out.numel() * 4 / seconds / 1e9


def _minimum(values: dict[str, float]) -> dict[str, float]:
    """Each value's minimum over the ranks."""
    gathered: list[dict[str, float] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, values)
    return {k: min(g[k] for g in gathered if g is not None) for k in values}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--intermediate", type=int, required=True)
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="float32")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if gpu else \
        torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if gpu else "gloo")
    try:
        shape = (args.tokens, args.hidden, args.intermediate)
        rates = {f"{name}_tflops": matmul_tflops(*shape, _DTYPES[name], device)
                 for name in sorted({args.dtype, "float32"})}
        rates["memory_gbps"] = memory_gbps(device)
        rates["collective_gbps"] = collective_gbps(device) if dist.get_world_size() > 1 else 0.0
        result = _minimum(rates)
        if dist.get_rank() == 0:
            result |= {"ranks": dist.get_world_size(), "device": "gpu" if gpu else "cpu",
                       "backend": dist.get_backend(), "threads": torch.get_num_threads()}
            write_text(args.out, json.dumps(result, indent=2) + "\n")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
