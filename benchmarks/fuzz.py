"""Fuzz every input channel and print, per channel, the examples run, the time and the
crashes found.

    python benchmarks/fuzz.py [--examples 10000] [--seed 0] [--channel NAME] [--jobs 2]

Channels: the spec as mutated documents, as damaged text and as raw bytes; `--set`
flags; model config.json files; accelerate configs for `fsdpspec import`; tokenizer
files, safetensors headers, run-directory files (metrics.jsonl, events.jsonl,
resolved-spec.json, a manifest) and output targets (links, FIFOs, directories, long
names …). A crash is an uncaught exception, a diagnostic without a code or a position, a
multi-line error, a failed import that wrote its output, or a refused write that changed
what was there. A hang is an example that takes longer than --hang-s (FIFOs included:
a reader that blocked on one would hang here). Target: 0 crashes and 0 hangs in every
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


def _alarm(_signum, _frame) -> None:
    raise Hang


def fuzz_channel(name: str, examples: int, seed: int,
                 hang_s: float = 30.0) -> tuple[int, list[str], int]:
    """(examples run, crash tracebacks, hangs) for one channel."""
    strategy, check = CHANNELS[name]
    crashes: list[str] = []
    hangs = 0
    count = 0
    signal.signal(signal.SIGALRM, _alarm)

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(example) -> None:
        nonlocal count, hangs
        count += 1
        with tempfile.TemporaryDirectory() as tmp:
            signal.setitimer(signal.ITIMER_REAL, hang_s)
            try:
                check(example, Path(tmp))
            except Hang:
                hangs += 1
            except Exception:  # a crash is a finding, not a stop
                crashes.append(traceback.format_exc(limit=4))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        if count % 1000 == 0:  # a long run stopped early still says how far it got
            print(f"  {name}: {count} examples so far, crashes: {len(crashes)}, hangs: {hangs}",
                  file=sys.stderr, flush=True)

    run._hypothesis_internal_use_seed = seed
    run()
    return count, crashes, hangs


def _fuzz(job: tuple[str, int, int, float]) -> tuple[str, int, list[str], int, float]:
    """One channel in a worker process: (name, examples, crashes, hangs, seconds)."""
    name, examples, seed, hang_s = job
    start = time.perf_counter()
    count, crashes, hangs = fuzz_channel(name, examples, seed, hang_s)
    return name, count, crashes, hangs, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000, help="per channel")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--channel", choices=list(CHANNELS), action="append")
    parser.add_argument("--hang-s", type=float, default=30.0,
                        help="an example running longer is a hang")
    parser.add_argument("--jobs", type=int, default=1, help="channels fuzzed at a time")
    args = parser.parse_args()
    jobs = [(name, args.examples, args.seed, args.hang_s) for name in args.channel or CHANNELS]
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
