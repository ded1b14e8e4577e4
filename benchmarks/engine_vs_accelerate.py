"""The engine against what a user runs instead: accelerate's DDP loop, on CPU.

On CPU accelerate runs only its DDP path (its FSDP path needs an accelerator), so the
engine runs at `sharding_strategy: NO_SHARD`. One torchrun job builds both on the same
processes — the engine's trainer from a resolved spec, and the loop a user writes with
accelerate's own `prepare` (same model geometry, random init, batch shape, AdamW, clip
at 1.0, the loss read every step) — and alternates their steps, so load from other
processes on a shared machine hits both alike. Prints both median step times and the
ratio engine / accelerate (target ≤ 1.0).

    python benchmarks/engine_vs_accelerate.py [--nproc 2] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP_STEPS = 5
# The model: a 4-layer, hidden-256 Llama.
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
          "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 4, "vocab_size": 320, "max_position_embeddings": 512,
          "tie_word_embeddings": False}


def write_spec(args: argparse.Namespace, run_dir: Path) -> Path:
    """The engine's resolved spec: NO_SHARD, synthetic data, constant lr, no checkpoints."""
    from fsdpspec.runfiles.resolved import write_resolved_spec
    from fsdpspec.spec.v1 import JobSpec

    (run_dir / "model").mkdir(parents=True)
    (run_dir / "model" / "config.json").write_text(json.dumps(CONFIG))
    spec = JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob",
        "metadata": {"name": "engine-vs-accelerate"},
        "resources": {"gpus_per_node": args.nproc},
        "model": {"hf_config": str(run_dir / "model")},
        "fsdp": {"sharding_strategy": "NO_SHARD"},
        "data": {"source": "synthetic", "seq_len": args.seq_len,
                 "micro_batch_size": args.micro_batch_size,
                 "global_batch_size": args.micro_batch_size * args.nproc},
        "optimizer": {"lr": 1e-3, "scheduler": {"name": "constant"}},
        "train": {"max_steps": 10 * args.steps},
        "checkpoint": {"interval_steps": 0, "final": {"enabled": False}},
        "logging": {"interval_steps": 1000},
    })
    return write_resolved_spec(spec, run_dir)


def accelerate_loop(args: argparse.Namespace):  # noqa: ANN201 - returns a step closure
    """The loop a user writes with accelerate: prepare, forward with labels, backward,
    clip, step, read the loss."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoConfig, AutoModelForCausalLM

    # cpu=True is what `accelerate launch --cpu` sets: without it accelerate runs each
    # process alone on a CPU (DistributedType.NO), with no gradient all-reduce at all.
    accelerator = Accelerator(cpu=True)
    if accelerator.num_processes != args.nproc:
        raise SystemExit(f"accelerate runs {accelerator.num_processes} of {args.nproc} processes "
                         f"({accelerator.distributed_type}): not the DDP loop to compare with")
    torch.manual_seed(0)
    config = AutoConfig.for_model(**{k: v for k, v in CONFIG.items() if k != "architectures"})
    config.use_cache = False
    model = AutoModelForCausalLM.from_config(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model, optimizer = accelerator.prepare(model, optimizer)
    shape = (args.micro_batch_size, args.seq_len)

    def step() -> None:
        batch = torch.randint(0, CONFIG["vocab_size"], shape, device=accelerator.device)
        loss = model(batch, labels=batch).loss
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()

    return step


def worker(spec_path: Path, args: argparse.Namespace) -> None:
    """Alternate engine and accelerate steps; rank 0 prints the comparison."""
    from fsdpspec.runfiles.resolved import read_resolved_job
    from fsdpspec_runners.engine.dist import init_runtime, teardown
    from fsdpspec_runners.engine.loop import train_step
    from fsdpspec_runners.engine.train import build_trainer

    job, run_dir = read_resolved_job(spec_path)
    runtime = init_runtime(job)
    trainer = build_trainer(job, run_dir, runtime)
    accelerate_step = accelerate_loop(args)
    times: dict[str, list[float]] = {"engine": [], "accelerate": []}
    for index in range(WARMUP_STEPS + args.steps):
        runs = (("engine", lambda: train_step(trainer)), ("accelerate", accelerate_step))
        for name, run in runs if index % 2 else runs[::-1]:
            start = time.perf_counter()
            run()
            if index >= WARMUP_STEPS:
                times[name].append(time.perf_counter() - start)
    if runtime.is_main:
        median = {k: statistics.median(v) for k, v in times.items()}
        tokens = args.micro_batch_size * runtime.world_size * args.seq_len
        print(f"4-layer hidden-256 Llama, {runtime.world_size} processes, {tokens} tokens/step, "
              f"medians over {args.steps} alternating steps")
        for name in times:
            spread = f"{min(times[name]) * 1e3:.0f}–{max(times[name]) * 1e3:.0f}"
            print(f"{name:<11} step {median[name] * 1e3:8.2f} ms (range {spread} ms)")
        print(f"ratio engine/accelerate: {median['engine'] / median['accelerate']:.3f} "
              "(target <= 1.0)")
    trainer.sink.close()
    teardown(clean=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        spec = write_spec(args, Path(tmp))
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={args.nproc}", __file__, "--worker", str(spec),
                "--steps", str(args.steps), "--seq-len", str(args.seq_len),
                "--micro-batch-size", str(args.micro_batch_size)]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"engine_vs_accelerate: the run failed:\n{result.stderr[-3000:]}")
    print(result.stdout.strip())


if __name__ == "__main__":
    main()
