"""How fast `fsdpspec tune` ranks: candidates planned per second of CPU, and the CPU and
wall time of the whole ranking (search, then validation of the shown candidates) on the
8 × H100 example and on a 1,024-GPU what-if of it.

    python benchmarks/tune_speed.py

Target: thousands of candidates well under a second, torch-free.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from fsdpspec.tune.pipeline import MEMORY_VERDICTS, open_levers, tune_file
from fsdpspec.tune.search import search
from fsdpspec.validate import check_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama3-8b-h100.yaml"
SEVENTY = ROOT / "examples" / "llama3-70b-multinode.yaml"
CASES = {
    "8 x H100-80GB, --vary all": (EXAMPLE, []),
    "1,024 x H100-80GB, global batch 16,384, --vary all": (EXAMPLE, [
        "resources.nodes=128", "launch.rdzv_endpoint=node0:29500",
        "data.global_batch_size=16384"]),
    # Issue 31: a 70B job with tensor parallelism among the levers (target: under 1 s).
    "Llama 3 70B, 64 x H100-80GB, --vary all (tensor parallelism 1-8)": (SEVENTY, []),
}


def main() -> int:
    for name, (example, overrides) in CASES.items():
        base = check_file(example, overrides, ignore=MEMORY_VERDICTS)
        assert base.job is not None
        cpu = time.process_time()
        search(base.job, set(open_levers(base, ["all"])))
        searched = time.process_time() - cpu
        cpu, wall = time.process_time(), time.perf_counter()
        ranking = tune_file(example, overrides, base, ["all"], 8)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"{name}: {ranking.tried:,} candidates planned in {searched:.3f} s CPU "
              f"({ranking.tried / searched:,.0f} per second), {ranking.fitting:,} fit; with "
              f"validation of the {len(ranking.ranked)} shown: {cpu:.3f} s CPU, "
              f"{wall:.3f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
