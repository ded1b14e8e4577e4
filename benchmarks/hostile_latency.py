"""Wall time of every spec-reading command on every hostile input, as a user runs them
(a fresh process each): `validate`, `plan`, `show` and `run --dry-run` on each file in
tests/cases/hostile/. Prints the slowest invocations and the maximum.

    python benchmarks/hostile_latency.py

Target: every refusal within 1 s (exit 1 or 2).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (["validate"], ["plan"], ["show"], ["run", "--dry-run"])


def main() -> None:
    timings: list[tuple[float, str, int]] = []
    with tempfile.TemporaryDirectory() as cwd:
        for case in sorted((ROOT / "tests" / "cases" / "hostile").glob("*.yaml")):
            for command in COMMANDS:
                start = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "fsdpspec", *command, str(case)],
                                      cwd=cwd, capture_output=True, check=False)
                label = f"{' '.join(command)} {case.name}"
                timings.append((time.perf_counter() - start, label, done.returncode))
    timings.sort(reverse=True)
    for seconds, label, code in timings[:5]:
        print(f"{seconds:6.3f} s  exit {code}  {label}")
    wrong = [label for _, label, code in timings if code not in (1, 2)]
    slowest = timings[0][0]
    print(f"invocations: {len(timings)}  max: {slowest:.3f} s  wrong exit codes: {len(wrong)}")
    print(f"target max <= 1.000 s: {'met' if slowest <= 1.0 and not wrong else 'NOT met'}")


if __name__ == "__main__":
    main()
