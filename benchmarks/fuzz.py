"""Fuzz every input channel and print, per channel, the examples run, the time and the
crashes found.

    python benchmarks/fuzz.py [--examples 10000] [--seed 0] [--channel NAME] [--jobs 2]

Channels: the spec as mutated documents, as damaged text and as raw bytes; `--set`
flags; model config.json files; accelerate configs for `fsdpspec import`; tokenizer
files, safetensors headers, run-directory files (metrics.jsonl, events.jsonl,
resolved-spec.json, a manifest), output targets (links, FIFOs, directories, long
names …) and `fsdpspec import` of all four kinds with hostile strings (newlines, '#',
quotes, ESC, NUL, planted keys; the written spec read back must be exactly the fields
the importer meant). A crash is an uncaught exception, a diagnostic without a code or a position, a
multi-line error, a failed import that wrote its output, or a refused write that changed
what was there. A hang is an example that uses more than --hang-s CPU seconds, or takes
more than --wall-s wall-clock seconds (FIFOs included: a reader that blocked on one would
hang here). Target: 0 crashes and 0 hangs in every
channel.

Every example runs in-process (a hang is caught by an alarm, which interrupts Python code
and the readers' waits alike); ``--jobs N`` fuzzes N channels at a time, each in a
process of its own, and prints each channel's line in order as it completes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from fuzz_channels import CHANNELS  # noqa: E402


class Hang(BaseException):
    """An example ran past the hang limit (a BaseException, so that no ``except
    Exception`` in the code under test can swallow it)."""


class _Timers:
    """Two limits per example: ``hang_s`` of CPU time (a loop), and ``wall_s`` of wall
    time (a read blocked on a FIFO uses no CPU). CPU time, not wall time, for the first:
    on a loaded machine at nice 19 a 50 ms example can wait 30 s for a core, which is
    not a hang. Each timer repeats every second once it has fired, because a signal
    raised inside a gc callback is printed and dropped by Python."""

    def __init__(self, hang_s: float, wall_s: float) -> None:
        self.hang_s, self.wall_s, self.armed = hang_s, wall_s, False
        signal.signal(signal.SIGPROF, self._fire)
        signal.signal(signal.SIGALRM, self._fire)

    def _fire(self, _signum, _frame) -> None:
        if self.armed:
            raise Hang

    def start(self) -> None:
        self.armed = True
        signal.setitimer(signal.ITIMER_PROF, self.hang_s, 1.0)
        signal.setitimer(signal.ITIMER_REAL, self.wall_s, 1.0)

    def stop(self) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)


def fuzz_channel(name: str, examples: int, seed: int, hang_s: float = 30.0,
                 wall_s: float = 600.0) -> tuple[int, list[str], int]:
    """(examples run, crash tracebacks, hangs) for one channel."""
    strategy, check = CHANNELS[name]
    crashes: list[str] = []
    hangs = 0
    count = 0
    timers = _Timers(hang_s, wall_s)

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(example) -> None:
        nonlocal count, hangs
        count += 1
        with tempfile.TemporaryDirectory() as tmp:
            try:
                timers.start()
                check(example, Path(tmp))
                timers.stop()
            except Hang:
                timers.stop()
                hangs += 1
            except Exception:  # a crash is a finding, not a stop
                timers.stop()  # first: a timer firing now must not escape to Hypothesis
                crashes.append(traceback.format_exc(limit=4))
        if count % 1000 == 0:  # a long run stopped early still says how far it got
            print(f"  {name}: {count} examples so far, crashes: {len(crashes)}, hangs: {hangs}",
                  file=sys.stderr, flush=True)

    run._hypothesis_internal_use_seed = seed
    run()
    return count, crashes, hangs


def _fuzz(job: tuple[str, int, int, float, float]) -> tuple[str, int, list[str], int, float]:
    """One channel in a worker process: (name, examples, crashes, hangs, seconds)."""
    name, examples, seed, hang_s, wall_s = job
    start = time.perf_counter()
    count, crashes, hangs = fuzz_channel(name, examples, seed, hang_s, wall_s)
    return name, count, crashes, hangs, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000, help="per channel")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--channel", choices=list(CHANNELS), action="append")
    parser.add_argument("--hang-s", type=float, default=30.0,
                        help="an example using more CPU seconds is a hang")
    parser.add_argument("--wall-s", type=float, default=600.0,
                        help="an example taking more wall-clock seconds is a hang (a "
                             "blocked read uses no CPU)")
    parser.add_argument("--jobs", type=int, default=1, help="channels fuzzed at a time")
    args = parser.parse_args()
    jobs = [(name, args.examples, args.seed, args.hang_s, args.wall_s)
            for name in args.channel or CHANNELS]
    total = 0
    # fork: the workers inherit the loaded strategies; each sets its own alarm handler.
    with multiprocessing.get_context("fork").Pool(max(1, args.jobs), maxtasksperchild=1) as pool:
        for name, count, crashes, hangs, elapsed in pool.imap(_fuzz, jobs):
            for crash in crashes[:3]:
                print(crash)
            print(f"{name:<26} examples: {count:6d}  crashes: {len(crashes)}  hangs: {hangs}  "
                  f"time: {elapsed:6.1f} s", flush=True)
            total += len(crashes) + hangs
    print(f"crashes and hangs in all channels: {total}")
    raise SystemExit(1 if total else 0)


if __name__ == "__main__":
    main()
