"""Run under torchrun by tests/engine/test_engine.py: logits of the engine's sharded model.

argv: TRAINED_SPEC WEIGHTS_SPEC OUT. Builds the trained run exactly as the engine does
(resuming its newest checkpoint), then a model loaded from ``model.weights``, and saves
both models' logits on one fixed batch to OUT (rank 0).
"""

from __future__ import annotations

import sys
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


def main() -> None:
    trained_spec, weights_spec, out = (Path(a) for a in sys.argv[1:4])
    job, run_dir = read_resolved_job(trained_spec)
    runtime = init_runtime(job)
    input_ids = torch.arange(64).remainder(257).view(2, 32)
    trainer = build_trainer(job, run_dir, runtime)
    from_checkpoint = logits(trainer.state.model, input_ids)
    loaded, _ = read_resolved_job(weights_spec)
    from_weights = logits(build_fsdp_model(loaded, runtime), input_ids)
    if runtime.is_main:
        torch.save(
            {"input_ids": input_ids, "checkpoint": from_checkpoint, "weights": from_weights}, out
        )
    trainer.sink.close()
    teardown(clean=True)


if __name__ == "__main__":
    main()
