"""Fuzz every input channel and print, per channel, the examples run, the time and the
crashes found.

    python benchmarks/fuzz.py [--examples 10000] [--seed 0] [--channel NAME]

Channels: the spec as mutated documents, as damaged text and as raw bytes; `--set`
flags; model config.json files; accelerate configs for `fsdpspec import`; tokenizer
files, safetensors headers, run-directory files (metrics.jsonl, events.jsonl,
resolved-spec.json, a manifest) and output targets (links, FIFOs, directories, long
names …). A crash is an uncaught exception, a diagnostic without a code or a position, a
multi-line error, a failed import that wrote its output, or a refused write that changed
what was there. A hang is an example that takes longer than --hang-s (FIFOs included:
a reader that blocked on one would hang here). Target: 0 crashes and 0 hangs in every
channel.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from fuzz_files import (  # noqa: E402
    check_output_target,
    check_run_file,
    check_safetensors_header,
    check_tokenizer_file,
    output_targets,
    run_files,
    safetensors_headers,
    tokenizer_files,
)
from fuzz_specs import (  # noqa: E402
    accelerate_configs,
    check_accelerate,
    check_model_config,
    check_set_flag,
    check_text,
    dump,
    model_configs,
    mutated_data,
    mutated_text,
    set_flags,
)


def _raw_bytes(raw: bytes, tmp: Path) -> None:
    from fsdpspec.validate import check_file

    path = tmp / "spec.yaml"
    path.write_bytes(raw)
    check_file(path)


# name → (strategy, check(example, temp dir))
CHANNELS: dict[str, tuple[Any, Callable[[Any, Path], None]]] = {
    "spec: mutated documents": (mutated_data(), lambda d, t: check_text(dump(d), t / "s.yaml")),
    "spec: damaged text": (mutated_text(), lambda x, t: check_text(x, t / "s.yaml")),
    "spec: raw bytes": (st.binary(max_size=2048), _raw_bytes),
    "--set flags": (set_flags(), lambda flag, _t: check_set_flag(flag)),
    "model config.json": (model_configs(), check_model_config),
    "accelerate configs": (accelerate_configs(), lambda d, t: check_accelerate(dump(d), t)),
    "tokenizer files": (tokenizer_files(), check_tokenizer_file),
    "safetensors headers": (safetensors_headers(), check_safetensors_header),
    "run-directory files": (run_files(), check_run_file),
    "output targets": (output_targets(), check_output_target),
}


class Hang(Exception):
    """An example ran past the hang limit."""


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

    run._hypothesis_internal_use_seed = seed
    run()
    return count, crashes, hangs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000, help="per channel")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--channel", choices=list(CHANNELS), action="append")
    parser.add_argument("--hang-s", type=float, default=30.0,
                        help="an example running longer is a hang")
    args = parser.parse_args()
    total = 0
    for name in args.channel or CHANNELS:
        start = time.perf_counter()
        count, crashes, hangs = fuzz_channel(name, args.examples, args.seed, args.hang_s)
        elapsed = time.perf_counter() - start
        for crash in crashes[:3]:
            print(crash)
        print(f"{name:<26} examples: {count:6d}  crashes: {len(crashes)}  hangs: {hangs}  "
              f"time: {elapsed:6.1f} s", flush=True)
        total += len(crashes) + hangs
    print(f"crashes and hangs in all channels: {total}")
    raise SystemExit(1 if total else 0)


if __name__ == "__main__":
    main()
