"""What this machine's processes reach while all of them run at once: matmul rate at the
job's layer shapes (in the compute dtype and in float32), memory bandwidth (a large
copy), collective bandwidth and latency (a large and a one-element all-gather over gloo
on CPU, NCCL on GPUs), the optimizer step's rate (a real AdamW step, as memory traffic)
and, given the job's resolved spec, the framework's fixed time per layer (forward and
backward of the job's own model at 4 tokens, less its FLOPs), each timed for a fraction
of a second: in wall time on GPUs, in the process's CPU time on a CPU. Every rank
measures; the slowest sets the step's pace, so rank 0 writes the slowest of each as
JSON. `fsdpspec tune --measure` starts it with torchrun and turns it into an
accelerator.

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
from fsdpspec.plan.steptime import optimizer_bytes_per_element

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Each measurement repeats its operation for about this long.
_SECONDS = 0.4
_COPY_BYTES = 64 << 20
_GATHER_BYTES = 8 << 20
_OPTIMIZER_NUMEL = 4 << 20
# The overhead's micro-batch: one sequence this long (its FLOPs are subtracted).
_OVERHEAD_TOKENS = 4
# Figures where the fastest rank sets the pace is the wrong reading: costs (larger is slower).
_COSTS = ("collective_latency_us", "layer_overhead_us")


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
    counts a ring collective), less the call's fixed latency."""
    world = dist.get_world_size()
    seconds = _gather_seconds(_GATHER_BYTES // 4, device) - _gather_seconds(1, device)
    return (world - 1) / world * world * _GATHER_BYTES / max(seconds, 1e-9) / 1e9


def collective_latency_us(device: torch.device) -> float:
    """Microseconds of a one-element all-gather: what every collective call costs."""
    return _gather_seconds(1, device) * 1e6


def _gather_seconds(numel: int, device: torch.device) -> float:
    """Seconds per all-gather of ``numel`` float32 per rank. Every rank must make the
    same number of calls, so the count is agreed (the smallest any rank asks for) before
    the timed ones."""
    world = dist.get_world_size()
    shard = torch.ones(numel, dtype=torch.float32, device=device)
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
    return max(clock() - start, 1e-9) / int(calls.item())


def optimizer_gbps(device: torch.device) -> float:
    """A torch AdamW step over a flat fp32 parameter, as the memory traffic the
    step-time model counts for it (two states)."""
    param = torch.nn.Parameter(torch.randn(_OPTIMIZER_NUMEL, device=device))
    param.grad = torch.randn_like(param)
    optimizer = torch.optim.AdamW([param], lr=1e-4)
    seconds = _timed(optimizer.step, device)
    return optimizer_bytes_per_element(2) * _OPTIMIZER_NUMEL / seconds / 1e9


def layer_overhead_us(resolved: Path, fp32_tflops: float, device: torch.device) -> float:
    """Microseconds per decoder layer of a forward and backward of the job's own model
    (built as the engine builds it, unsharded) at _OVERHEAD_TOKENS tokens, less those
    tokens' FLOPs at the measured rate: the framework's fixed time per micro-batch
    (Python, op dispatch, autograd), the root's share spread over the layers."""
    from fsdpspec.runfiles.resolved import read_resolved_job
    from fsdpspec_runners.engine.model_build import build_model

    job, _ = read_resolved_job(resolved)
    assert job.geometry is not None  # tune calibrates only jobs with a geometry
    model = build_model(job, on_meta=False).to(device)
    ids = torch.randint(0, job.geometry.vocab_size, (1, _OVERHEAD_TOKENS), device=device)

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    seconds = _timed(step, device)
    flops = 6 * sum(p.numel() for p in model.parameters()) * _OVERHEAD_TOKENS
    fixed = max(0.0, seconds - flops / (fp32_tflops * 1e12))
    return fixed / job.geometry.num_layers * 1e6


def _slowest(values: dict[str, float]) -> dict[str, float]:
    """Each figure of the slowest rank: the smallest rate, the largest cost."""
    gathered: list[dict[str, float] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, values)
    return {k: (max if k in _COSTS else min)(g[k] for g in gathered if g is not None)
            for k in values}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--intermediate", type=int, required=True)
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="float32")
    parser.add_argument("--resolved", type=Path, default=None,
                        help="the job's resolved-spec.json: also time its layers' overhead")
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
        rates["optimizer_gbps"] = optimizer_gbps(device)
        several = dist.get_world_size() > 1
        rates["collective_gbps"] = collective_gbps(device) if several else 0.0
        rates["collective_latency_us"] = collective_latency_us(device) if several else 0.0
        if args.resolved is not None:
            rates["layer_overhead_us"] = layer_overhead_us(
                args.resolved, rates["float32_tflops"], device)
        result = _slowest(rates)
        if dist.get_rank() == 0:
            result |= {"ranks": dist.get_world_size(), "device": "gpu" if gpu else "cpu",
                       "backend": dist.get_backend(), "threads": torch.get_num_threads()}
            write_text(args.out, json.dumps(result, indent=2) + "\n")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    from fsdpspec_runners.engine.dist import leave

    main()
    leave(0)
