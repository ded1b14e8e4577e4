"""What a rank costs the test suite cold (as a user's ranks start) and warm (forked by
tests/support/warm_ranks/, as the suite's ranks start): `fsdpspec run
examples/quickstart.yaml --set train.max_steps=6` (2 ranks on gloo) each way, CPU seconds
of the launch (CLI, torchrun agent, the processes in the ranks' places) and of the ranks
themselves, and the wall time, with the load average.

    python benchmarks/warm_ranks.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support" / "warm_ranks"))
import warm_ranks  # noqa: E402  (found through the line above)

TICKS = os.sysconf("SC_CLK_TCK")


def _children_cpu(pid: int) -> float:
    """CPU seconds of the reaped children of ``pid`` (the forked ranks of a server)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / TICKS


def _run(directory: Path, server: int | None) -> tuple[float, float, float]:
    """(wall s, launch CPU-s, ranks' CPU-s) of one quickstart run."""
    env = dict(os.environ)
    if server is None:
        env.pop(warm_ranks.SOCKET_ENV, None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ranks_before = _children_cpu(server) if server else 0.0
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fsdpspec", "run", str(ROOT / "examples/quickstart.yaml"),
                    "--set", "train.max_steps=6", "--set", f"checkpoint.dir={directory}/{{name}}"],
                   cwd=directory, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    launch = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if server:
        time.sleep(0.5)  # the server reaps its ranks as they end
        return wall, launch, _children_cpu(server) - ranks_before
    return wall, launch, 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch, "server.log").open("w")
        server = warm_ranks.start(str(Path(scratch, "s")), log)
        # not counted: the first warm run waits for the server's preload
        _run(Path(tempfile.mkdtemp(dir=scratch)), server.pid)
        for name, pid in (("cold", None), ("warm", server.pid)):
            rows = [_run(Path(tempfile.mkdtemp(dir=scratch)), pid) for _ in range(runs)]
            wall, launch, ranks = (statistics.median(column) for column in zip(*rows, strict=True))
            print(f"{name}: median of {runs}: {wall:.2f} s wall, {launch:.2f} CPU-s in the "
                  f"launch, {ranks:.2f} CPU-s in the forked ranks, "
                  f"{launch + ranks:.2f} CPU-s in all")
        server.stdin.close()
        server.wait(timeout=30)
        log.close()
        forked = Path(scratch, "server.log").read_text().count(" forked as pid ")
    print(f"ranks forked warm: {forked} (expected {2 * runs + 2}); "
          f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
