"""Engine overhead: the engine's step time over a minimal hand-written FSDP2 loop.

One torchrun job builds both on the same processes — the engine's trainer from a
resolved spec, and a bare ``fully_shard`` model with AdamW — and alternates their steps,
so load from other processes on a shared machine hits both alike. Same model geometry,
batch shape, optimizer and gradient clipping; the engine adds its data pipeline, loss,
schedule, non-finite check and the per-step agreement collective. Prints both median
step times, the ratio (target ≤ 1.05) and tokens/s.

    python benchmarks/engine_overhead.py [--nproc 2] [--preset tiny-llama] [--steps 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP_STEPS = 5


def write_spec(args: argparse.Namespace, run_dir: Path) -> Path:
    """The engine's resolved spec: synthetic data, constant lr, no checkpoints."""
    from fsdpspec.runfiles.resolved import write_resolved_spec
    from fsdpspec.spec.v1 import JobSpec

    spec = JobSpec.model_validate(
        {
            "apiVersion": "fsdpspec/v1",
            "kind": "TrainingJob",
            "metadata": {"name": "engine-overhead"},
            "resources": {"gpus_per_node": args.nproc},
            "model": {"preset": args.preset},
            "data": {
                "source": "synthetic",
                "seq_len": args.seq_len,
                "micro_batch_size": args.micro_batch_size,
                "global_batch_size": args.micro_batch_size * args.nproc,
            },
            "optimizer": {"lr": 1e-3, "scheduler": {"name": "constant"}},
            "train": {"max_steps": 10 * args.steps},
            "checkpoint": {"interval_steps": 0, "final": {"enabled": False}},
        }
    )
    return write_resolved_spec(spec, run_dir)


def hand_written(spec_path: Path):  # noqa: ANN201 - returns a step closure
    """The minimal FSDP2 loop: fully_shard per layer and root, AdamW, clip, step."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    from fsdpspec.catalog.presets import preset_config
    from fsdpspec.runfiles.resolved import read_resolved_spec

    spec, _, _ = read_resolved_spec(spec_path)
    device = (
        torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        if torch.cuda.is_available()
        else torch.device("cpu")
    )
    config = preset_config(spec.model.preset)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    model.to_empty(device=device)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
        for m in model.modules():  # rotary buffers are not parameters
            if hasattr(m, "compute_default_rope_parameters"):
                m.inv_freq.copy_(m.compute_default_rope_parameters(m.config)[0])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    shape = (spec.data.micro_batch_size, spec.data.seq_len)

    def step() -> None:
        batch = torch.randint(0, config["vocab_size"], shape).to(device)
        loss = model(batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).full_tensor().item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()

    return step


def worker(spec_path: Path, steps: int) -> None:
    """Alternate engine and hand-written steps; rank 0 prints the comparison."""
    import torch

    from fsdpspec.runfiles.resolved import read_resolved_job
    from fsdpspec_runners.engine.dist import init_runtime, teardown
    from fsdpspec_runners.engine.loop import train_step
    from fsdpspec_runners.engine.train import build_trainer

    job, run_dir = read_resolved_job(spec_path)
    spec = job.spec
    runtime = init_runtime(job)
    trainer = build_trainer(job, run_dir, runtime)
    hand_step = hand_written(spec_path)
    times: dict[str, list[float]] = {"engine": [], "hand": []}
    for index in range(WARMUP_STEPS + steps):
        for name, run in (("engine", lambda: train_step(trainer)), ("hand", hand_step)):
            start = time.perf_counter()
            run()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if index >= WARMUP_STEPS:
                times[name].append(time.perf_counter() - start)
    if runtime.is_main:
        report(spec, runtime.world_size, {k: statistics.median(v) for k, v in times.items()})
    trainer.sink.close()
    teardown(clean=True)


def report(spec, world_size: int, median: dict[str, float]) -> None:  # noqa: ANN001
    tokens = spec.data.micro_batch_size * world_size * spec.data.seq_len
    print(
        f"model {spec.model.preset}, {world_size} processes, {tokens} tokens/step, "
        "medians over alternating steps"
    )
    for name, label in (("engine", "engine   "), ("hand", "hand loop")):
        print(f"{label} step {median[name] * 1e3:8.2f} ms  {tokens / median[name]:10.0f} tokens/s")
    print(f"ratio engine/hand-written: {median['engine'] / median['hand']:.3f} (target <= 1.05)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--preset", default="tiny-llama")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps)
        return
    with tempfile.TemporaryDirectory() as tmp:
        spec = write_spec(args, Path(tmp))
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={args.nproc}",
            __file__,
            "--worker",
            str(spec),
            "--steps",
            str(args.steps),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"engine_overhead: the run failed:\n{result.stderr[-3000:]}")
    print(result.stdout.strip())


if __name__ == "__main__":
    main()
