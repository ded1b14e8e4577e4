#!/usr/bin/env bash
# GPU smoke test of the engine: one preset, 20 steps, FSDP2 FULL_SHARD in bf16 on every
# visible GPU, then the same job with float8 (torchao, tensorwise) where the GPU has FP8
# tensor cores; each run's tokens/s and peak reserved memory beside `fsdpspec plan`'s
# (benchmarks/gpu_smoke_job.py). Then, on 2 or more GPUs, a context-parallel run
# (benchmarks/gpu_smoke_cp.py: a 32k-token sequence split over the GPUs with ring
# attention), its peak memory and tokens/s beside `fsdpspec plan`'s.
# Skips (exit 0) without a CUDA GPU.
#
#   benchmarks/gpu_smoke.sh                 # llama3.2-1b, seq_len 2048
#   PRESET=qwen2.5-0.5b SEQ_LEN=1024 benchmarks/gpu_smoke.sh
#   FLOAT8="off" benchmarks/gpu_smoke.sh    # bf16 only
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
# float8 needs FP8 tensor cores (compute capability 8.9: Ada, 9.0: Hopper, or later).
if [ -z "${FLOAT8+set}" ]; then
  FLOAT8=$("$PYTHON" -c 'import torch; print("tensorwise" if torch.cuda.get_device_capability() >= (8, 9) else "off")')
fi

RUN_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/fsdpspec-gpu-smoke.XXXXXX")
trap 'rm -rf "$RUN_ROOT"' EXIT
export PYTHONPATH=.:benchmarks

for RECIPE in off $FLOAT8; do
  RUN_DIR="$RUN_ROOT/$RECIPE"
  [ -d "$RUN_DIR" ] && continue  # FLOAT8=off: bf16 once
  NGPU=$("$PYTHON" benchmarks/gpu_smoke_job.py write "$RUN_DIR" "$PRESET" "$SEQ_LEN" \
    "$MICRO_BATCH" "$RECIPE")
  "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$NGPU" \
    -m fsdpspec_runners.engine --spec "$RUN_DIR/resolved-spec.json"
  "$PYTHON" benchmarks/gpu_smoke_job.py compare "$RUN_DIR"
done

"$PYTHON" benchmarks/gpu_smoke_cp.py
