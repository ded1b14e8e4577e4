"""A fixed-seed slice of benchmarks/fuzz.py for every input channel besides the spec
documents and text (tests/spec/test_fuzz.py has those; issues 11, 20): the spec as raw
bytes, --set flags, model config.json files, accelerate configs, tokenizer files,
safetensors headers, run-directory files, output targets, every command's `-o`,
`report` of hostile run directories, the four imports with hostile strings and with
fuzzed parallelism keys; `tune -o` and `--calibration`, the peft and lever fields, export
of a multi-node spec, and the budget flags of `plan` and `tune` (issue 42). The
benchmark runs 10,000 examples per channel; here a few dozen, derandomized."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from fuzz_channels import CHANNELS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Examples per channel: the file channels build a directory per example, so fewer.
SLICE = {"spec: raw bytes": 40, "--set flags": 40, "model config.json": 40,
         "accelerate configs": 40, "tokenizer files": 15, "safetensors headers": 15,
         "run-directory files": 15, "output targets": 15, "output targets: commands": 12,
         "report: hostile run directories": 10,
         # issue 29: hostile strings in every kind of import, the spec read back
         **{f"import {kind}: hostile strings": 40
            for kind in ("accelerate", "trainer", "axolotl", "torchtitan")},
         # issue 42: the parallelism keys; a written spec is one `validate` accepts
         **{f"import {kind}: parallelism keys": 30
            for kind in ("accelerate", "trainer", "axolotl", "torchtitan")},
         "tune -o": 15, "tune --calibration": 30, "peft values": 30, "lever fields": 30,
         "export multi-node": 30,
         "budget flags": 30}


@pytest.mark.parametrize("name", sorted(SLICE))
def test_channel(name: str) -> None:
    strategy, check = CHANNELS[name]

    @settings(max_examples=SLICE[name], deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            check(data.draw(strategy), Path(tmp))

    one()
