"""Time and peak memory of `fsdpspec report` on a run directory whose metrics.jsonl has
many lines, as a user runs it (a fresh process).

    python benchmarks/report_large.py [--lines 6000000]

The run directory is generated in a temporary directory: the quickstart's resolved spec
and ``--lines`` metrics records of the engine's shape (6 million lines are 193 MiB,
under the 256 MiB read bound). Prints the file's size, the wall and CPU time, the report's
peak resident set and the vertices of its loss curve. The records are streamed and each
curve thinned to at most 2 × MAX_POINTS points, so the peak resident set does not grow
with the number of lines (before, read whole: 620 MB for 1 million lines, 3.4 GB for 6
million).
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = '{{"step": {step}, "loss": {loss:.4f}}}\n'


def write_run(run: Path, lines: int) -> int:
    """The run directory with ``lines`` metrics records; the metrics file's size."""
    from fsdpspec.runfiles.resolved import write_resolved_spec
    from fsdpspec.validate import check_file

    write_resolved_spec(check_file(ROOT / "examples" / "quickstart.yaml").spec, run)
    metrics = run / "metrics.jsonl"
    with metrics.open("w") as fh:
        for start in range(1, lines + 1, 100_000):
            fh.write("".join(RECORD.format(step=step, loss=5.0 / step ** 0.1)
                             for step in range(start, min(start + 100_000, lines + 1))))
    return metrics.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=6_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run, page = Path(tmp) / "run", Path(tmp) / "report.html"
        size = write_run(run, args.lines)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "fsdpspec", "report", str(run),
                               "-o", str(page)], capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_mib, cpu_s = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
        if done.returncode != 0:
            sys.exit(f"report failed ({done.returncode}): {done.stderr.strip()}")
        loss = re.search(r'<g id="data-loss-0-0">.*?</g>', page.read_text(), re.S)
        vertices = len(re.findall(r"^\s*[ML] ", loss.group(0), re.M)) if loss else 0
    print(f"metrics.jsonl: {args.lines} lines, {size / 2**20:.0f} MiB")
    print(f"report: {seconds:.1f} s wall, {cpu_s:.1f} CPU-s, peak resident set "
          f"{peak_mib:.0f} MiB, "
          f"loss curve's SVG path: {vertices} vertices (after matplotlib's simplification)")


if __name__ == "__main__":
    main()
