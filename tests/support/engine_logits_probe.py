"""Logits of the engine's sharded models, probed under torchrun by engine_batch.py
(engine_jobs.train_then_probe).

For each (TRAINED_SPEC, WEIGHTS_SPEC), builds the trained run exactly as the engine does
(resuming its newest checkpoint), then a model loaded from ``model.weights``, and saves
both models' logits on one fixed batch to OUT_DIR/probe-i.pt (rank 0). The pairs share
one process group.
"""

from __future__ import annotations

from pathlib import Path

import torch

from fsdpspec.runfiles.resolved import read_resolved_job
from fsdpspec_runners.engine.dist import init_runtime, teardown
from fsdpspec_runners.engine.train import build_fsdp_model, build_trainer


def logits(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model(input_ids).logits
    # A tensor-parallel model's logits are split by vocabulary (a DTensor).
    return (out.full_tensor() if hasattr(out, "full_tensor") else out).detach().cpu()


def probe(out_dir: Path, specs: list[Path]) -> None:
    pairs = list(zip(specs[::2], specs[1::2], strict=True))
    runtime = init_runtime(read_resolved_job(pairs[0][0])[0])
    input_ids = torch.arange(64).remainder(257).view(2, 32)
    for index, (trained_spec, weights_spec) in enumerate(pairs):
        job, run_dir = read_resolved_job(trained_spec)
        trainer = build_trainer(job, run_dir, runtime)
        from_checkpoint = logits(trainer.state.model, input_ids)
        loaded, _ = read_resolved_job(weights_spec)
        from_weights = logits(build_fsdp_model(loaded, runtime), input_ids)
        if runtime.is_main:
            torch.save({"input_ids": input_ids, "checkpoint": from_checkpoint,
                        "weights": from_weights}, out_dir / f"probe-{index}.pt")
        trainer.sink.close()
    teardown(clean=True)
