"""The input channels that benchmarks/fuzz.py fuzzes and tests/spec/test_fuzz_channels.py
samples: each name → (a Hypothesis strategy of examples, the check of one example in an
empty temporary directory, which raises on a broken promise)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from fuzz_commands import (
    budget_flags,
    calibrations,
    check_budget_flags,
    check_calibration,
    check_levers,
    check_multinode_export,
    check_peft,
    check_tune_output,
    lever_fields,
    multinode_exports,
    peft_sections,
    tune_targets,
)
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
from fuzz_imports import check_import, check_parallel_import, hostile_imports, parallel_imports
from fuzz_outputs import check_command_target, check_hostile_run, command_targets, hostile_runs
from fuzz_specs import (
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
from fuzz_yaml import MARKED_SPECS, YAML_NOISE, check_readers_agree
from hypothesis import strategies as st


class Channel(NamedTuple):
    strategy: Any
    check: Callable[[Any, Path], None]


def _raw_bytes(raw: bytes, tmp: Path) -> None:
    from fsdpspec.validate import check_file

    path = tmp / "spec.yaml"
    path.write_bytes(raw)
    check_file(path)


CHANNELS: dict[str, Channel] = {
    "spec: mutated documents": Channel(mutated_data(),
                                       lambda d, t: check_text(dump(d), t / "s.yaml")),
    "spec: damaged text": Channel(mutated_text(), lambda x, t: check_text(x, t / "s.yaml")),
    "spec: raw bytes": Channel(st.binary(max_size=2048), _raw_bytes),
    # issue 42: the fast path (libyaml) reads a text as ruamel does, or declines it
    "spec: YAML fast path vs ruamel": Channel(
        st.one_of(YAML_NOISE, MARKED_SPECS, mutated_text(), mutated_data().map(dump)),
        check_readers_agree),
    "--set flags": Channel(set_flags(), lambda flag, _t: check_set_flag(flag)),
    "model config.json": Channel(model_configs(), check_model_config),
    "accelerate configs": Channel(accelerate_configs(),
                                  lambda d, t: check_accelerate(dump(d), t)),
    "tokenizer files": Channel(tokenizer_files(), check_tokenizer_file),
    "safetensors headers": Channel(safetensors_headers(), check_safetensors_header),
    "run-directory files": Channel(run_files(), check_run_file),
    "output targets": Channel(output_targets(), check_output_target),
    "output targets: commands": Channel(command_targets(), check_command_target),
    "report: hostile run directories": Channel(hostile_runs(), check_hostile_run),
    **{f"import {kind}: hostile strings": Channel(hostile_imports(kind), check_import)
       for kind in ("accelerate", "trainer", "axolotl", "torchtitan")},
    **{f"import {kind}: parallelism keys": Channel(parallel_imports(kind),
                                                   check_parallel_import)
       for kind in ("accelerate", "trainer", "axolotl", "torchtitan")},
    "tune -o": Channel(tune_targets(), check_tune_output),
    "tune --calibration": Channel(calibrations(), check_calibration),
    "peft values": Channel(peft_sections(), check_peft),
    "lever fields": Channel(lever_fields(), check_levers),
    "export multi-node": Channel(multinode_exports(), check_multinode_export),
    "budget flags": Channel(budget_flags(), check_budget_flags),
}
