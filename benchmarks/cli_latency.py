"""Median wall time of `fsdpspec validate examples/quickstart.yaml`, and its ratio to
`python -c "import torch"` (what a torch-importing validator would cost at least).

    python benchmarks/cli_latency.py [--runs 15] [--spec FILE]

Target: median ≤ 0.3 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def median_seconds(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--spec", default="examples/quickstart.yaml")
    args = parser.parse_args()
    validate = median_seconds([sys.executable, "-m", "fsdpspec", "validate", args.spec], args.runs)
    torch = median_seconds([sys.executable, "-c", "import torch"], max(3, args.runs // 3))
    # Without a __pycache__ (PYTHONDONTWRITEBYTECODE in a fresh tree) every run compiles
    # fsdpspec's modules from source: about 40 ms more on 2 cores.
    cached = (ROOT / "fsdpspec" / "__pycache__").is_dir()
    print(f"fsdpspec bytecode cache present: {'yes' if cached else 'no'}")
    print(f"validate {args.spec}: median {validate:.3f} s over {args.runs} runs")
    print(f"python -c 'import torch': median {torch:.3f} s")
    print(f"ratio validate/import-torch: {validate / torch:.2f}")
    print(f"target median <= 0.300 s: {'met' if validate <= 0.3 else 'NOT met'}")


if __name__ == "__main__":
    main()
