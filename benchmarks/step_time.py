"""The step-time model (fsdpspec/plan/steptime.py) against published FSDP runs (and one
FSDP × tensor-parallel run, and FSDP × context-parallel runs): predicted
vs published tokens/s per GPU and the error of each row of benchmarks/published_runs.yaml.

    python benchmarks/step_time.py          # the table; exit 1 when a check fails
    python benchmarks/step_time.py --fit    # the efficiency each `fit: true` row implies

Checks: every row within the model's stated band (steptime.STEP_TIME_BAND, 15 %);
between rows that differ only in activation checkpointing or in GPU count, the
predicted order is the published one. The fitted rows set the catalogue's bf16
efficiency of their accelerator (fsdpspec/catalog/accelerators.py), so they match by
construction; the others are the test.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from fsdpspec.catalog.accelerators import CATALOG, Accelerator
from fsdpspec.job.job import Job, resolve
from fsdpspec.plan.compute import step_compute
from fsdpspec.plan.memory import GIB, device_memory
from fsdpspec.plan.steptime import STEP_TIME_BAND, StepTime, step_time
from fsdpspec.semantics import OP_LEVEL
from fsdpspec.spec.v1 import JobSpec

ROWS = Path(__file__).with_name("published_runs.yaml")
TOLERANCE = STEP_TIME_BAND
DTYPE = "bfloat16"


def row_spec(row: dict[str, Any]) -> JobSpec:
    """The row as a spec: FSDP2 FULL_SHARD over every data-parallel rank (every GPU
    without `tensor_parallel` or `context_parallel`), bf16 with fp32 reduction, one
    micro-batch per step (torchtitan's local batch)."""
    tp, cp = row.get("tensor_parallel", 1), row.get("context_parallel", 1)
    ranks = row["nodes"] * row["gpus_per_node"] // (tp * cp)
    ac = "none" if row["ac"] == OP_LEVEL else row["ac"]
    spec = JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "row"},
        "resources": {"nodes": row["nodes"], "gpus_per_node": row["gpus_per_node"],
                      "accelerator": row["accelerator"]},
        # Ring attention replaces SDPA's flash kernel (what context parallelism needs).
        "model": {"preset": row["preset"], **({"attention": "sdpa"} if cp > 1 else {})},
        "parallelism": {"tensor_parallel": tp, "context_parallel": cp},
        "fsdp": {"mixed_precision": {"param_dtype": DTYPE, "reduce_dtype": "float32"},
                 "activation_checkpointing": ac, "ac_every": row.get("ac_every", 2)},
        "data": {"seq_len": row["seq_len"], "micro_batch_size": row["micro_batch_size"],
                 "global_batch_size": row["micro_batch_size"] * ranks},
        # torchtitan's float8 converter: the output projection stays in bf16.
        "float8": {"recipe": row["float8"]} if "float8" in row else None,
        "train": {"compile": row.get("compile", False)},
    })
    if row["ac"] == OP_LEVEL:  # not a spec value yet: set on the typed spec directly
        spec = spec.model_copy(update={"fsdp": spec.fsdp.model_copy(
            update={"activation_checkpointing": OP_LEVEL})})
    return spec


def row_job(row: dict[str, Any]) -> Job:
    """The row resolved (its preset's geometry, layout and units)."""
    return resolve(row_spec(row), Path("."))


def predict(row: dict[str, Any], device: Accelerator | None = None) -> tuple[StepTime, float]:
    """(predicted step, predicted peak reserved GiB) of one row."""
    job = row_job(row)
    assert job.geometry is not None
    device = device or CATALOG[row["accelerator"]]
    c = step_compute(job, job.geometry.active_params, device, DTYPE)
    step = step_time(job, c, device, DTYPE)
    assert step is not None
    return step, device_memory(job).peak_reserved / GIB


def fitted_efficiency(row: dict[str, Any]) -> float:
    """The bf16 efficiency at which the row's prediction equals its published figure
    (bisection: throughput rises with efficiency)."""
    base = CATALOG[row["accelerator"]]
    low, high = 0.05, 1.0
    for _ in range(50):
        mid = (low + high) / 2
        device = dataclasses.replace(base, bf16_efficiency=mid)
        if predict(row, device)[0].tokens_per_s < row["tokens_per_s"]:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _orders(rows: list[dict[str, Any]], predicted: list[float]) -> list[tuple[str, bool]]:
    """Pairs that differ in one thing only (AC mode, or GPU count): is the faster
    published row predicted faster?"""
    keys = ("preset", "accelerator", "micro_batch_size", "seq_len")
    checks = []
    for i, a in enumerate(rows):
        for j in range(i + 1, len(rows)):
            b = rows[j]
            if any(a[k] != b[k] for k in keys):
                continue
            same_gpus = (a["nodes"], a["gpus_per_node"]) == (b["nodes"], b["gpus_per_node"])
            if same_gpus == (a["ac"] == b["ac"]):
                continue
            published = a["tokens_per_s"] >= b["tokens_per_s"]
            faster, slower = (a, b) if published else (b, a)
            ok = (predicted[i] >= predicted[j]) == published
            checks.append((f"{faster['name']} ≥ {slower['name']}", ok))
    return checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true",
                        help="print the efficiency each fitted row implies")
    args = parser.parse_args()
    rows = YAML(typ="safe").load(ROWS.read_text(encoding="utf-8"))["rows"]
    if args.fit:
        for row in rows:
            if row.get("fit"):
                print(f"{row['accelerator']} bf16_efficiency {fitted_efficiency(row):.4f} "
                      f"(from {row['name']})")
        return 0
    failures = 0
    predicted = []
    print(f"{'row':<46}{'published':>10}{'predicted':>10}{'error':>8}  {'bound':<14}"
          f"{'MFU':>6}{'GiB':>7}  role")
    for row in rows:
        step, reserved = predict(row)
        error = step.tokens_per_s / row["tokens_per_s"] - 1
        within = abs(error) <= TOLERANCE
        failures += not within
        predicted.append(step.tokens_per_s)
        role = "fitted" if row.get("fit") else "judged"
        # The memory walk has no op-level checkpointing yet: no figure rather than a wrong one.
        memory = "-" if row["ac"] == OP_LEVEL else f"{reserved:.1f}"
        print(f"{row['name']:<46}{row['tokens_per_s']:>10,}{step.tokens_per_s:>10,.0f}"
              f"{100 * error:>+7.1f}%  {step.bound:<14}{100 * step.mfu:>5.1f}%"
              f"{memory:>7}  {role}{'' if within else '  OUTSIDE 15 %'}")
    fitted = sorted({f"{r['accelerator']} bf16_efficiency "
                     f"{CATALOG[r['accelerator']].bf16_efficiency}" for r in rows if r.get("fit")})
    print("fitted constants: " + "; ".join(fitted))
    for name, ok in _orders(rows, predicted):
        failures += not ok
        print(f"order {'holds' if ok else 'WRONG'}: {name}")
    judged = [abs(p / r["tokens_per_s"] - 1) for p, r in zip(predicted, rows, strict=True)
              if not r.get("fit")]
    print(f"judged rows: {len(judged)}, max |error| {100 * max(judged):.1f}%")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
