"""How fast the answers come: median wall time (and CPU time) of the commands users run
in editors, hooks and CI, against `python -c "import torch"` in the same run (what a
torch-importing validator would cost at least).

    python benchmarks/cli_latency.py [--runs 7]

Targets (docs: README, issue 34):
- `fsdpspec validate examples/quickstart.yaml` ≤ 0.20 s and ≥ 8× faster than importing torch;
- `fsdpspec plan examples/llama3-8b-h100.yaml` ≤ 0.25 s;
- `fsdpspec validate` of 100 spec files in one call < 3× the time of one;
- `fsdpspec tune examples/torchtitan-llama3-8b.yaml --tokens 1e12 --max-gpus 64` < 1 s.

The checkout is compiled to bytecode first, as `pip install` compiles an installed
package (this machine sets PYTHONDONTWRITEBYTECODE, so without it every run would compile
fsdpspec from source: about 40 ms more on 2 cores). The load average is printed before
and after: on a shared machine wall time is what the neighbours leave, CPU time what the
command costs.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = "examples/quickstart.yaml"
FSDPSPEC = [sys.executable, "-m", "fsdpspec"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``argv`` over ``runs`` runs."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu, start = _children_cpu(), time.perf_counter()
        subprocess.run(argv, cwd=ROOT, capture_output=True, check=False)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "fsdpspec", "runners"],
                   cwd=ROOT, check=True)
    print(f"load average before: {_load()}")
    with tempfile.TemporaryDirectory() as tmp:
        many = [shutil.copy(ROOT / QUICKSTART, Path(tmp) / f"job-{i:03}.yaml")
                for i in range(100)]
        figures = {
            "validate": timed([*FSDPSPEC, "validate", QUICKSTART], args.runs),
            "plan": timed([*FSDPSPEC, "plan", "examples/llama3-8b-h100.yaml"], args.runs),
            "validate x100": timed([*FSDPSPEC, "validate", *map(str, many)], args.runs),
            "tune": timed([*FSDPSPEC, "tune", "examples/torchtitan-llama3-8b.yaml",
                           "--tokens", "1e12", "--max-gpus", "64"], args.runs),
            "import torch": timed([sys.executable, "-c", "import torch"], args.runs),
        }
    print(f"load average after: {_load()}")
    for name, (wall, cpu) in figures.items():
        print(f"{name:<14} median {wall:.3f} s wall, {cpu:.3f} s CPU over {args.runs} runs")
    validate, plan = figures["validate"][0], figures["plan"][0]
    many_wall, tune, torch = figures["validate x100"][0], figures["tune"][0], figures[
        "import torch"][0]
    checks = {
        f"validate <= 0.20 s ({validate:.3f})": validate <= 0.20,
        f"validate >= 8x faster than import torch ({torch / validate:.1f}x)":
            torch / validate >= 8,
        f"plan <= 0.25 s ({plan:.3f})": plan <= 0.25,
        f"100 files < 3x one ({many_wall / validate:.2f}x)": many_wall < 3 * validate,
        f"tune --tokens --max-gpus < 1 s ({tune:.3f})": tune < 1.0,
    }
    for text, met in checks.items():
        print(f"{'met' if met else 'NOT met'}: {text}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
