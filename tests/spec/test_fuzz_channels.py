"""A fixed-seed slice of benchmarks/fuzz.py for every input channel (issues 11, 20): the
spec as raw bytes, --set flags, model config.json files, accelerate configs, tokenizer
files, safetensors headers, run-directory files and output targets. The
benchmark runs 10,000 examples per channel; here a few dozen, derandomized."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fuzz_files import (
    check_output_target,
    check_run_file,
    check_safetensors_header,
    check_tokenizer_file,
    output_targets,
    run_files,
    safetensors_headers,
    tokenizer_files,
)
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


FILES = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))


@FILES
@given(tokenizer_files())
def test_tokenizer_files(example) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_tokenizer_file(example, Path(tmp))


@FILES
@given(safetensors_headers())
def test_safetensors_headers(raw) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_safetensors_header(raw, Path(tmp))


@FILES
@given(run_files())
def test_run_directory_files(example) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_run_file(example, Path(tmp))


@FILES
@given(output_targets())
def test_output_targets(example) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_output_target(example, Path(tmp))
