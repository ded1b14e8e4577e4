"""Analytic plan versus the fake-tensor trace (`plan --trace`), peak allocated per rank.

Each row is a real preset (0.5B–8B and Mixture-of-Experts models) at its full depth, planned
with `plan_job` and traced with FSDPMemTracker on FakeTensorMode and a fake process group
of the shard-group size; the LoRA rows cover every model family.
Prints each row's error, then the median and maximum |error|; exits 1 when the median
exceeds 1% or the maximum 3%.

Gemma 2 and gpt-oss run with eager attention (transformers refuses SDPA for them).

    python benchmarks/plan_accuracy.py            # every row (a few minutes on 2 cores)
    python benchmarks/plan_accuracy.py --rows 3   # the first three
    python benchmarks/plan_accuracy.py --match moe # the rows whose name has "moe"
    python benchmarks/plan_accuracy.py --match lora # the LoRA rows (one per family)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from fsdpspec.job.job import resolve
from fsdpspec.plan.planner import plan_job
from fsdpspec.spec.v1 import JobSpec

GIB = 1 << 30

# name, preset, nodes × gpus_per_node, strategy, precision, checkpointing, micro-batch,
# sequence, attention, extra fsdp fields, global batch (None: no accumulation).
ROWS: list[tuple[Any, ...]] = [
    ("qwen0.5b-fs-bf16-mb4", "qwen2.5-0.5b", (1, 8), "FULL_SHARD", "bf16", "none", 4, 1024,
     "sdpa", {}, None),
    ("qwen0.5b-noshard-fp32", "qwen2.5-0.5b", (1, 4), "NO_SHARD", "fp32", "none", 1, 2048,
     "sdpa", {}, None),
    ("qwen0.5b-sgo-sel-8k", "qwen2.5-0.5b", (1, 2), "SHARD_GRAD_OP", "bf16", "selective", 1,
     8192, "sdpa", {}, None),
    ("llama1b-fs-acfull-4k", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "full", 2, 4096,
     "sdpa", {}, None),
    ("llama1b-sgo-2k", "llama3.2-1b", (1, 8), "SHARD_GRAD_OP", "bf16", "none", 1, 2048,
     "sdpa", {}, None),
    ("llama1b-fs-accum2", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, 16),
    ("llama3b-hybrid-sel-4k", "llama3.2-3b", (2, 8), "HYBRID_SHARD", "bf16", "selective", 1,
     4096, "sdpa", {}, None),
    ("llama3b-fs-fp32-32", "llama3.2-3b", (4, 8), "FULL_SHARD", "fp32", "none", 1, 2048,
     "sdpa", {}, None),
    ("phi3-fs-eager-1k", "phi3-mini", (1, 8), "FULL_SHARD", "bf16", "none", 1, 1024,
     "eager", {}, None),
    ("llama3b-fs-eager-mb2-1k", "llama3.2-3b", (2, 8), "FULL_SHARD", "bf16", "none", 2, 1024,
     "eager", {}, None),
    ("gemma2-2b-fs-eager-2k", "gemma2-2b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "eager", {}, None),
    ("mistral7b-fs-window-4k", "mistral-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096,
     "sdpa", {}, None),
    ("mistral7b-fs-acfull-mb2", "mistral-7b", (2, 8), "FULL_SHARD", "bf16", "full", 2, 2048,
     "sdpa", {}, None),
    ("qwen7b-hsdp-zero2-acfull", "qwen2.5-7b", (4, 8), "HYBRID_SHARD_ZERO2", "bf16", "full", 1,
     2048, "sdpa", {}, None),
    ("llama8b-fs-bf16-4k", "llama3-8b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096,
     "sdpa", {}, None),
    ("llama8b-fs-acfull-8k-64", "llama3-8b", (8, 8), "FULL_SHARD", "bf16", "full", 1, 8192,
     "sdpa", {}, None),
    # Newer dense families.
    ("gemma3-1b-fs-window-2k", "gemma3-1b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None),
    ("olmo2-7b-fs-2k", "olmo2-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa", {},
     None),
    ("pythia1.4b-fs-mb4-2k", "pythia-1.4b", (1, 8), "FULL_SHARD", "bf16", "none", 4, 2048,
     "sdpa", {}, None),
    ("starcoder2-3b-sgo-2k", "starcoder2-3b", (1, 8), "SHARD_GRAD_OP", "bf16", "none", 1,
     2048, "sdpa", {}, None),
    # Mixture of Experts (bf16: transformers' grouped expert matmul).
    ("mixtral-8x7b-fs-16", "mixtral-8x7b", (2, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None),
    ("qwen3-30b-a3b-fs-acfull", "qwen3-30b-a3b", (2, 8), "FULL_SHARD", "bf16", "full", 1,
     4096, "sdpa", {}, None),
    ("olmoe-fs-4k", "olmoe-1b-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096, "sdpa", {},
     None),
    ("phi3.5-moe-fs-16", "phi3.5-moe", (2, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa",
     {}, None),
    ("gpt-oss-20b-fs-eager-1k", "gpt-oss-20b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 1024,
     "eager", {}, None),
]

# LoRA, one row per family (the frozen base in bf16, fp32 adapters on the family's default
# targets), without checkpointing and with full checkpointing; qwen3 and gemma have no
# preset and are read from their config.json under tests/models/.
_LORA = {"r": 16, "alpha": 32}
LORA_ROWS: list[tuple[Any, ...]] = [
    ("lora-llama1b-4k", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096, "sdpa",
     {}, None, _LORA),
    ("lora-llama8b-acfull-4k-1gpu", "llama3-8b", (1, 1), "FULL_SHARD", "bf16", "full", 1, 4096,
     "sdpa", {}, None, _LORA),
    ("lora-mistral7b-window-4k", "mistral-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096,
     "sdpa", {}, None, _LORA),
    ("lora-qwen0.5b-mb2-2k", "qwen2.5-0.5b", (1, 4), "FULL_SHARD", "bf16", "none", 2, 2048,
     "sdpa", {}, None, _LORA),
    ("lora-qwen3-0.6b-2k", "tests/models/qwen3", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None, _LORA),
    ("lora-gemma2b-acfull-2k", "tests/models/gemma", (1, 8), "FULL_SHARD", "bf16", "full", 1,
     2048, "sdpa", {}, None, _LORA),
    ("lora-gemma2-2b-eager-2k", "gemma2-2b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "eager", {}, None, _LORA),
    ("lora-gemma3-1b-2k", "gemma3-1b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa",
     {}, None, _LORA),
    ("lora-olmo2-7b-2k", "olmo2-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa",
     {}, None, _LORA),
    ("lora-pythia1.4b-2k", "pythia-1.4b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None, _LORA),
    ("lora-starcoder2-3b-acfull", "starcoder2-3b", (1, 8), "FULL_SHARD", "bf16", "full", 1,
     2048, "sdpa", {}, None, _LORA),
    ("lora-phi3-eager-1k", "phi3-mini", (1, 8), "FULL_SHARD", "bf16", "none", 1, 1024, "eager",
     {}, None, _LORA),
    ("lora-mixtral-8x7b-16", "mixtral-8x7b", (2, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None, _LORA),
    ("lora-qwen3-30b-a3b-acfull", "qwen3-30b-a3b", (2, 8), "FULL_SHARD", "bf16", "full", 1,
     4096, "sdpa", {}, None, _LORA),
    ("lora-olmoe-4k", "olmoe-1b-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096, "sdpa", {},
     None, _LORA),
    ("lora-phi3.5-moe-16", "phi3.5-moe", (2, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa",
     {}, None, _LORA),
    ("lora-gpt-oss-20b-eager-1k", "gpt-oss-20b", (1, 8), "FULL_SHARD", "bf16", "none", 1,
     1024, "eager", {}, None, _LORA),
]


def row_spec(row: tuple[Any, ...]) -> JobSpec:
    """The JobSpec of one benchmark row."""
    name, preset, (nodes, per_node), strategy, precision, ac, micro, seq, attention = row[:9]
    extra, gbs, *peft = row[9:]
    # A path names a config.json directory (relative to the repository) instead of a preset.
    source = ({"hf_config": str(Path(__file__).parents[1] / preset)} if "/" in preset
              else {"preset": preset})
    return JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": name},
        "resources": {"nodes": nodes, "gpus_per_node": per_node, "accelerator": "H100-80GB"},
        "model": {**source, "attention": attention},
        **({"peft": peft[0]} if peft else {}),
        "fsdp": {"sharding_strategy": strategy, "mixed_precision": precision,
                 "activation_checkpointing": ac, **extra},
        "data": {"seq_len": seq, "micro_batch_size": micro,
                 "global_batch_size": gbs or micro * nodes * per_node},
    })


def measure(row: tuple[Any, ...]) -> tuple[int, int, int, float]:
    """(shard-group size, analytic peak allocated, traced peak, seconds the trace took)
    of one row."""
    from fsdpspec_runners.engine.trace import trace_job

    job = resolve(row_spec(row), Path.cwd())
    plan = plan_job(job)
    start = time.perf_counter()
    traced = trace_job(job)
    return (plan.job.layout.shard_size, plan.device.peak_allocated, traced.peak_bytes,
            time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=len(ROWS) + len(LORA_ROWS),
                        help="run the first N rows")
    parser.add_argument("--match", default="", help="only rows whose name contains this")
    args = parser.parse_args()
    print(f"{'row':<28}{'shard':>6}{'analytic GiB':>14}{'traced GiB':>12}{'error':>8}{'s':>6}")
    errors = []
    rows = ROWS + LORA_ROWS
    for row in [r for r in rows[: args.rows] if args.match in r[0]]:
        shard, analytic, traced, seconds = measure(row)
        error = (analytic - traced) / traced
        errors.append(abs(error))
        print(f"{row[0]:<28}{shard:>6}{analytic / GIB:>14.2f}{traced / GIB:>12.2f}"
              f"{100 * error:>+7.1f}%{seconds:>6.0f}", flush=True)
    median, worst = statistics.median(errors), max(errors)
    print(f"median |error| {100 * median:.2f}%   max |error| {100 * worst:.2f}%"
          f"   (targets: median ≤ 1%, max ≤ 3%)")
    return 0 if median <= 0.01 and worst <= 0.03 else 1


if __name__ == "__main__":
    sys.exit(main())
