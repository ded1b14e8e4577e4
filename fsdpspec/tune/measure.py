"""`tune --measure`: calibrate this machine, then train the fastest candidates that
differ enough to be told apart a few steps each with the real launcher (`fsdpspec run`,
as a child process), in rounds that visit them in alternating order, and read their step
times back from metrics.jsonl. Torch runs only in the children.

The calibration (`fsdpspec_runners.engine.calibrate`) becomes an accelerator: on a CPU a
custom device with the measured rates (efficiency 1: they are what a step reaches), on a
GPU `resources.performance` (the measured share of the peak, memory and link bandwidth)
beside the catalogue entry. It is written as YAML the user can reuse (`--calibration`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdpspec.atomicio import write_text
from fsdpspec.job.job import Job
from fsdpspec.job.rundir import RunDir
from fsdpspec.spec.load import join, load_file
from fsdpspec.spec.v1 import JobSpec
from fsdpspec.spec.yamltext import dump_yaml

LAUNCHER = (sys.executable, "-m", "fsdpspec_runners.local.quiet_torchrun")
CALIBRATE = "fsdpspec_runners.engine.calibrate"
# The first step pays for lazy initialisation: it is not timed.
WARMUP_STEPS = 1
# Two candidates whose predicted steps are closer than this share are one to a
# measurement: on the shared 2-core build machine a candidate's median CPU time per step
# moved by 2–8 % between two rounds (their median, the figure, by about half that;
# docs/tune.md), so only the faster-predicted one is measured.
DISTINCT = 0.05


class MeasureError(Exception):
    """A calibration or a measured run that did not finish: one line saying which."""


@dataclass(frozen=True)
class Measured:
    """Per-step times of one candidate's runs, after each run's warm-up."""

    wall: tuple[float, ...]
    cpu: tuple[float, ...]  # rank 0's CPU time per step
    rounds: tuple[float, ...]  # each run's median CPU time per step

    @property
    def seconds(self) -> float:
        """The fastest step, wall time."""
        return min(self.wall)

    @property
    def cpu_seconds(self) -> float:
        """Rank 0's median CPU time per step over every run."""
        return statistics.median(self.cpu)

    @property
    def spread(self) -> float:
        """How far the runs' medians lie apart, as a share of the median."""
        return (max(self.rounds) - min(self.rounds)) / self.cpu_seconds

    def __add__(self, other: Measured) -> Measured:
        return Measured(self.wall + other.wall, self.cpu + other.cpu,
                        self.rounds + other.rounds)


def distinct(seconds: Sequence[float], k: int, share: float = DISTINCT) -> list[int]:
    """Up to ``k`` indices of ``seconds`` (predicted step times, fastest first), each
    predicted at least ``share`` slower than the one before it: the fastest, then the
    next that a measurement can tell from it, and so on."""
    chosen: list[int] = []
    for index, value in enumerate(seconds):
        if len(chosen) == k:
            break
        if not chosen or value >= seconds[chosen[-1]] * (1 + share):
            chosen.append(index)
    return chosen


def calibrate(job: Job, resolved: Path, out: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run the calibration on ``job``'s processes of one node (in ``env``, what `fsdpspec
    run` gives them), at its micro-batch and layer widths, and on a CPU with its own
    model (its ``resolved`` spec) for the fixed time per layer; its JSON result."""
    spec, g = job.spec, job.geometry
    assert g is not None  # tune plans only jobs with a geometry
    tokens = min(job.batch.tokens, 4096)
    argv = [*LAUNCHER, "--standalone", "--nnodes", "1", "--nproc-per-node",
            str(job.layout.gpus_per_node), "-m", CALIBRATE, "--out", str(out),
            "--tokens", str(tokens), "--hidden", str(g.hidden_size),
            "--intermediate", str(g.intermediate_size),
            "--dtype", spec.fsdp.mixed_precision.param_dtype]
    if not spec.device().is_gpu:  # a GPU hides the layers' fixed time (calibrated_resources)
        argv += ["--resolved", str(resolved)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0 or not out.is_file():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise MeasureError(f"calibration failed (exit {done.returncode}): {tail}")
    return json.loads(out.read_text(encoding="utf-8"))


def calibrated_resources(spec: JobSpec, result: dict[str, Any]) -> dict[str, Any]:
    """The `resources` fields the calibration sets."""
    dtype = spec.fsdp.mixed_precision.param_dtype
    if result["device"] == "cpu":
        fp32 = result["float32_tflops"]
        low = result.get(f"{dtype}_tflops", fp32)
        return {"accelerator": {
            "name": f"cpu-calibrated-{result['ranks']}x{result['threads']}",
            "device": "cpu", "memory_gib": spec.resources.host_memory_gib,
            "fp32_tflops": round(fp32, 6), "bf16_tflops": round(
                low if dtype == "bfloat16" else fp32, 6),
            "fp16_tflops": round(low if dtype == "float16" else fp32, 6),
            "supports_bf16": True, "hbm_gbps": round(result["memory_gbps"], 3),
            "intra_node_gbps": round(result["collective_gbps"] or 1.0, 3),
            "inter_node_gbps": round(result["collective_gbps"] or 1.0, 3),
            "host_gbps": round(result["memory_gbps"], 3), "bf16_efficiency": 1.0,
            "fp16_efficiency": 1.0, "fp32_efficiency": 1.0,
            "optimizer_gbps": round(result["optimizer_gbps"], 3),
            "collective_latency_us": round(result["collective_latency_us"], 1),
            "layer_overhead_us": round(result.get("layer_overhead_us", 0.0), 1)}}
    device = spec.device()
    share = result[f"{dtype}_tflops"] / device.peak_tflops(dtype)
    # The layers' fixed time is left out on a GPU: there the host queues kernels ahead of
    # the device, so a step's launch time hides under its compute.
    performance = {"hbm_gbps": round(result["memory_gbps"], 1),
                   f"{_efficiency_dtype(dtype)}_efficiency": round(min(1.0, share), 4),
                   "optimizer_gbps": round(result["optimizer_gbps"], 1)}
    if result["collective_gbps"]:
        performance["intra_node_gbps"] = round(result["collective_gbps"], 1)
        performance["collective_latency_us"] = round(result["collective_latency_us"], 1)
    return {"performance": performance}


def _efficiency_dtype(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16"}.get(dtype, "fp32")


# The `resources` fields calibrated_resources sets: the only keys --calibration applies.
CALIBRATED_KEYS = ("accelerator", "performance")


def calibration_overrides(resources: dict[str, Any]) -> list[str]:
    """`--set` lines applying the calibrated resources: each key one of CALIBRATED_KEYS
    (read_calibration refuses others), each value as JSON (YAML reads it verbatim)."""
    assert set(resources) <= set(CALIBRATED_KEYS)
    return [f"resources.{key}={json.dumps(resources[key])}" for key in CALIBRATED_KEYS
            if key in resources]


def write_calibration(path: Path, resources: dict[str, Any], result: dict[str, Any]) -> None:
    head = (f"# Measured by `fsdpspec tune --measure` on this machine: {result['ranks']} "
            f"process(es), {result['backend']}, {result['threads']} thread(s) each.\n"
            "# Reuse it: `fsdpspec tune JOB --measure K --calibration THIS_FILE`, or copy "
            "`resources` into a spec.\n")
    write_text(path, head + dump_yaml({"resources": resources}))


def read_calibration(path: Path) -> dict[str, Any]:
    """The `resources` of a calibration file written by write_calibration, read as a
    spec is (a regular file, bounded in size and alias expansion); MeasureError with one
    coded line for anything else."""
    loaded = load_file(path)
    if loaded.diagnostics:
        first = loaded.diagnostics[0]
        raise MeasureError(f"{first.location}: {first.code} {first.message}")
    data = loaded.data
    resources = data.get("resources") if isinstance(data, dict) else None
    if not isinstance(resources, dict) or not resources:
        raise MeasureError(f"{path}: expected a `resources:` mapping, as "
                           "`fsdpspec tune --measure` writes")
    for key in resources:
        if key not in CALIBRATED_KEYS:
            file, at = loaded.source_map.locate(join("/resources", str(key)), key=True)
            shown = key if isinstance(key, str) and key and key.isprintable() else repr(key)
            raise MeasureError(f"{file}:{at.line}:{at.col}: FS020 resources.{shown} is not "
                               f"a calibrated field (only {', '.join(CALIBRATED_KEYS)})")
    return resources


def measure(file: Path, overrides: Sequence[str], run_dir: Path, steps: int) -> Measured:
    """Train ``file`` with ``overrides`` for ``steps`` steps in ``run_dir`` (empty:
    `fsdpspec.tune.rundirs.fresh_dir`),
    through `fsdpspec run`: the wall and rank 0's CPU time of each step after the
    warm-up (on a CPU shared with other work, CPU time is what a step costs whatever the
    load: its processes run one thread each, and loopback gloo's transfers are CPU work
    too)."""
    settings = [*overrides, f"train.max_steps={steps}",
                f"checkpoint.dir={json.dumps(str(run_dir))}", "checkpoint.interval_steps=0",
                "checkpoint.resume=never", "checkpoint.final.enabled=false",
                "logging.interval_steps=1", "logging.tensorboard=false",
                "train.eval_interval_steps=0"]
    argv = [sys.executable, "-m", "fsdpspec", "run", str(file)]
    for setting in settings:
        argv += ["--set", setting]
    done = subprocess.run(argv, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    metrics = RunDir(run_dir).metrics
    if done.returncode != 0 or not metrics.is_file():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise MeasureError(f"`fsdpspec run` failed (exit {done.returncode}): {tail}")
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines()
               if line.strip()]
    timed = [r for r in records if "step_time_s" in r and r["step"] > WARMUP_STEPS]
    if not timed:
        raise MeasureError(f"{metrics}: no step after the warm-up was logged")
    cpu = tuple(r["step_cpu_s"] for r in timed)
    return Measured(tuple(r["step_time_s"] for r in timed), cpu, (statistics.median(cpu),))


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (ties take their average rank)."""
    ra, rb = _ranks(a), _ranks(b)
    n = len(a)
    mean = (n + 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb, strict=True))
    var_a = sum((x - mean) ** 2 for x in ra)
    var_b = sum((y - mean) ** 2 for y in rb)
    return cov / (var_a * var_b) ** 0.5 if var_a and var_b else 0.0


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks
