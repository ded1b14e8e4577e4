"""float8 training's terms (`Job.float8`): the weights FSDP2 all-gathers in one byte,
the float8 casts a converted matmul makes, and the share of a step's FLOPs that runs at
the accelerator's FP8 rate.

torchao's Float8Linear saves its high-precision input and weight for backward (as
`nn.Linear` does) and casts them again there, so the saved activations are a bf16 run's;
the casts are temporaries: the input and weight in forward, the output gradient (in two
layouts: one for each gradient's matmul), the input and weight again in backward. Their
elementwise passes (an absolute maximum, then the scaled cast) are memory traffic.
"""

from __future__ import annotations

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.job import Job
from fsdpspec.job.units import Unit

FLOAT8_BYTES = 1
# Bytes one cast moves per element: the amax pass reads the bf16 tensor (2), the cast
# reads it again and writes float8 (2 + 1).
CAST_BYTES_PER_ELEMENT = 5


def _inside(path: str, unit: Unit) -> bool:
    return path.startswith(f"{unit.name}.") or path == unit.name


def unit_float8_numel(job: Job, unit: Unit, shard_size: int) -> int:
    """Elements of one gathered copy of ``unit`` that FSDP2 all-gathers in float8
    (padding included): its converted weights; for the root, those no other unit holds."""
    f8 = job.float8
    if f8 is None or not f8.all_gather:
        return 0
    assert job.units is not None
    others = job.units.units
    total = 0
    for path, (out, into), _ in f8.linears:
        holder = next((u for u in others if _inside(path, u)), None)
        if holder is unit or (holder is None and unit is job.units.root):
            total += -(-out // shard_size) * shard_size * into
    return total


def gathered_float8_saving(job: Job, unit: Unit, shard_size: int) -> int:
    """Bytes one gathered copy of ``unit`` takes less than in the compute dtype."""
    return (job.compute_bytes - FLOAT8_BYTES) * unit_float8_numel(job, unit, shard_size)


def _largest(job: Job) -> tuple[int, int]:
    """(out, in) of the converted Linear whose backward casts are largest."""
    f8 = job.float8
    assert f8 is not None
    tokens = job.batch.tokens  # this rank's (context parallelism splits the sequence)
    return max((s for _, s, _ in f8.linears), default=(0, 0),
               key=lambda s: tokens * (2 * s[0] + s[1]) + s[0] * s[1])


def backward_cast_bytes(job: Job) -> int:
    """The float8 casts alive in one converted matmul's backward: the output gradient in
    both layouts, the input, and (gathered in the compute dtype) the weight."""
    if job.float8 is None:
        return 0
    out, into = _largest(job)
    tokens = job.batch.tokens  # this rank's (context parallelism splits the sequence)
    weight = 0 if job.float8.all_gather else out * into
    return FLOAT8_BYTES * (tokens * (2 * out + into) + weight)


def cast_traffic_bytes(job: Job) -> int:
    """Memory traffic of one micro-batch's casts: per converted Linear, its input in
    forward and again in backward, its output gradient twice, and its weight in forward
    and backward unless FSDP2 gathered it in float8 (cast once, on the shard)."""
    f8 = job.float8
    if f8 is None:
        return 0
    tokens = job.batch.tokens  # this rank's (context parallelism splits the sequence)
    per_layer = 0
    for _, (out, into), count in f8.linears:
        weight = 0 if f8.all_gather else 2 * out * into
        per_layer += count * (tokens * 2 * (into + out) + weight)
    return CAST_BYTES_PER_ELEMENT * per_layer


def float8_share(job: Job, model_flops_per_token: float) -> float:
    """The share of the model's FLOPs in converted matmuls (6 per weight and token)."""
    f8 = job.float8
    if f8 is None or not model_flops_per_token:
        return 0.0
    return min(1.0, 6 * f8.numel / model_flops_per_token)


def matmul_rate(job: Job, device: Accelerator, compute_dtype: str,
                model_flops_per_token: float) -> float:
    """FLOP/s the step's matrix multiplies run at: the converted share at the FP8 peak
    (at the compute dtype's achievable share of it: a prior, docs/memory.md), the rest at
    the compute dtype's; the compute dtype's alone on a device without FP8 tensor
    cores."""
    rate = device.achievable_tflops(compute_dtype) * 1e12
    share = float8_share(job, model_flops_per_token)
    if not share or not device.fp8_tflops or not rate:
        return rate
    fp8 = device.fp8_tflops * device.efficiency(compute_dtype) * 1e12
    return 1 / (share / fp8 + (1 - share) / rate)
