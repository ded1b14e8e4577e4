#!/usr/bin/env bash
# GPU smoke test of the engine: one preset, 20 steps, FSDP2 FULL_SHARD in bf16 on every
# visible GPU; prints tokens/s, MFU and peak memory. Skips (exit 0) without a CUDA GPU.
#
#   benchmarks/gpu_smoke.sh                 # llama3.2-1b, seq_len 2048
#   PRESET=qwen2.5-0.5b SEQ_LEN=1024 benchmarks/gpu_smoke.sh
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
PRESET=${PRESET:-llama3.2-1b}
SEQ_LEN=${SEQ_LEN:-2048}
MICRO_BATCH=${MICRO_BATCH:-2}

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_smoke: no CUDA GPU visible; skipped"
  exit 0
fi

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/fsdpspec-gpu-smoke.XXXXXX")
trap 'rm -rf "$RUN_DIR"' EXIT

NGPU=$(PRESET="$PRESET" SEQ_LEN="$SEQ_LEN" MICRO_BATCH="$MICRO_BATCH" RUN_DIR="$RUN_DIR" \
  PYTHONPATH=. "$PYTHON" - <<'PY'
import os
from pathlib import Path

import torch

from fsdpspec.catalog.accelerators import CATALOG
from fsdpspec_runners.local.resolved import write_resolved_spec
from fsdpspec.spec.v1 import JobSpec

ngpu = torch.cuda.device_count()
name = torch.cuda.get_device_name(0)
# The catalogue entry whose family appears in the device name (for the MFU peak).
accelerator = next((k for k in CATALOG if k.split("-")[0] in name), None)
micro = int(os.environ["MICRO_BATCH"])
spec = JobSpec.model_validate({
    "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "gpu-smoke"},
    "resources": {"gpus_per_node": ngpu, **({"accelerator": accelerator} if accelerator else {})},
    "model": {"preset": os.environ["PRESET"]},
    "fsdp": {"mixed_precision": "bf16"},
    "data": {"source": "synthetic", "seq_len": int(os.environ["SEQ_LEN"]),
             "micro_batch_size": micro, "global_batch_size": micro * ngpu},
    "optimizer": {"lr": 1e-4, "scheduler": {"name": "constant"}},
    "train": {"max_steps": 20},
    "checkpoint": {"interval_steps": 0, "final": {"enabled": False}},
    "logging": {"interval_steps": 5},
})
write_resolved_spec(spec, Path(os.environ["RUN_DIR"]))
print(ngpu)
PY
)

PYTHONPATH=. "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$NGPU" \
  -m fsdpspec_runners.engine --spec "$RUN_DIR/resolved-spec.json"

RUN_DIR="$RUN_DIR" "$PYTHON" - <<'PY'
import json, os
last = [json.loads(l) for l in open(os.path.join(os.environ["RUN_DIR"], "metrics.jsonl"))][-1]
print(f"gpu_smoke: step {last['step']}  tokens/s {last['tokens_per_s']:.0f}  "
      f"MFU {last['mfu']:.1%}  peak allocated {last['peak_mem_allocated_gib']:.2f} GiB  "
      f"peak reserved {last['peak_mem_reserved_gib']:.2f} GiB")
PY
