"""Fuzz the validation pipeline with mutated valid specs and print the crashes found.

    python benchmarks/fuzz.py [--examples 10000] [--seed 0]

A crash is an uncaught exception, or a diagnostic without a code or with a position
outside the file. Target: 0. Half the examples mutate the document, half the text.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from fuzz_specs import check_text, dump, mutated_data, mutated_text  # noqa: E402


def run(examples: int, seed: int) -> list[str]:
    crashes: list[str] = []
    config = settings(max_examples=examples, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))

    def attempt(text: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                check_text(text, Path(tmp) / "spec.yaml")
            except Exception:  # a crash is a finding, not a stop
                crashes.append(traceback.format_exc(limit=3))

    @config
    @given(mutated_data())
    def documents(data) -> None:
        attempt(dump(data))

    @config
    @given(mutated_text())
    def texts(text) -> None:
        attempt(text)

    for fuzz in (documents, texts):
        fuzz._hypothesis_internal_use_seed = seed
        fuzz()
    return crashes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    crashes = run(args.examples // 2, args.seed)
    elapsed = time.perf_counter() - start
    for crash in crashes[:5]:
        print(crash)
    print(f"examples: {args.examples}  crashes: {len(crashes)}  time: {elapsed:.1f} s")
    raise SystemExit(1 if crashes else 0)


if __name__ == "__main__":
    main()
