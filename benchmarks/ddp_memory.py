"""The plan of a DDP job (NO_SHARD in full precision, `fsdpspec.job.layout.runs_as_ddp`)
against what real DDP allocates: real tensors on the CPU, one gloo process, torch's
MemTracker over two steps as the engine takes them (the second holds the optimizer
states and rebuilds DDP's buckets; `plan --trace` cannot run DDP: its C++ reducer needs
real tensors). A Llama of hidden 256, 4 layers, vocabulary 16,000, micro-batch 2, AdamW,
sequences of 256 and 16; with one and with two micro-batches a step (under accumulation
the second step rebuilds the buckets while the first micro-batch's gradients still live
in the old ones). Prints plan, measured peak and error per row; exits 1 when a row is
more than 1 % off.

    python benchmarks/ddp_memory.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

GIB = 1 << 30
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
          "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 16000, "max_position_embeddings": 1024,
          "tie_word_embeddings": False}
STEPS = 2
# (micro-batches a step, sequence): activations and logits well above the buckets, and a
# short sequence where the buckets and states dominate; each with and without
# accumulation.
ROWS = ((1, 256), (2, 256), (1, 16), (2, 16))
TOLERANCE = 0.01


def measure(model_dir: Path, micro_batches: int, seq_len: int) -> tuple[int, int]:
    """(planned, measured) peak allocated bytes of the job with ``micro_batches`` of
    ``seq_len`` tokens (times 2) a step."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    from fsdpspec.job.job import resolve
    from fsdpspec.plan.planner import plan_job
    from fsdpspec.spec.v1 import JobSpec
    from fsdpspec_runners.engine.model_build import build_model
    from fsdpspec_runners.engine.trace import shard_job, train_step

    spec = JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "ddp"},
        "resources": {"gpus_per_node": 1, "accelerator": "H100-80GB"},
        "model": {"hf_config": str(model_dir), "attention": "sdpa"},
        "fsdp": {"sharding_strategy": "NO_SHARD", "mixed_precision": "fp32"},
        "data": {"source": "synthetic", "seq_len": seq_len, "micro_batch_size": 2,
                 "global_batch_size": 2 * micro_batches},
    })
    job = resolve(spec, model_dir)
    assert job.layout.ddp
    from fsdpspec_runners.engine.mesh import build_mesh, fsdp_mesh

    mesh = fsdp_mesh(build_mesh(job.layout.dims, "cpu"), job.layout.dims)
    cpu = torch.device("cpu")
    model = build_model(job, on_meta=True)
    optimizer = shard_job(job, model, mesh, cpu)
    # One tracker over every step: the buckets DDP allocates in the first forward (and
    # rebuilds in the second step) are seen being allocated.
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        for _ in range(STEPS):
            train_step(job, model, optimizer, cpu, tracker.reset_mod_stats)
            tracker.reset_mod_stats()
    measured = tracker.get_tracker_snapshot("peak")[cpu]["Total"]
    return plan_job(job).device.peak_allocated, int(measured)


def main() -> int:
    import torch.distributed as dist

    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        # A file store: no port to collide with another process's.
        dist.init_process_group("gloo", rank=0, world_size=1,
                                store=dist.FileStore(str(Path(tmp) / "store"), 1))
        try:
            (Path(tmp) / "config.json").write_text(json.dumps(CONFIG))
            print(f"{'micro-batches × tokens':<24}{'plan GiB':>10}{'measured GiB':>14}"
                  f"{'error':>9}")
            for micro_batches, seq_len in ROWS:
                planned, measured = measure(Path(tmp), micro_batches, seq_len)
                error = planned / measured - 1
                worst = max(worst, abs(error))
                print(f"{f'{micro_batches} × 2 × {seq_len}':<24}{planned / GIB:>10.4f}"
                      f"{measured / GIB:>14.4f}{error:>+9.2%}")
        finally:
            dist.destroy_process_group()
    print(f"max |error| {worst:.2%} (target ≤ {TOLERANCE:.0%})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
