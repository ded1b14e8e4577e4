"""A fixed-seed slice of benchmarks/fuzz.py for every input channel (issue 11): the
spec as raw bytes, --set flags, model config.json files and accelerate configs. The
benchmark runs 10,000 examples per channel; here a few dozen, derandomized."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fuzz_specs import (
    accelerate_configs,
    check_accelerate,
    check_model_config,
    check_set_flag,
    dump,
    model_configs,
    set_flags,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdpspec.validate import check_file

SLICE = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))


@SLICE
@given(st.binary(max_size=2048))
def test_raw_bytes_as_a_spec(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_bytes(raw)
        check_file(path)


@SLICE
@given(set_flags())
def test_set_flags(flag: str) -> None:
    check_set_flag(flag)


@SLICE
@given(model_configs())
def test_model_configs(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_model_config(raw, Path(tmp))


@SLICE
@given(accelerate_configs())
def test_accelerate_configs(data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_accelerate(dump(data), Path(tmp))
