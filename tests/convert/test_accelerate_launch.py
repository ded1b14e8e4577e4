"""`fsdpspec export accelerate` read by REAL accelerate: its own config loader, then its
launcher's argument validation and environment (what `accelerate launch` does before
starting a process), on every example and on an fp32, a bf16 and an fp16 spec. And
`fsdpspec import accelerate` yields a spec that validates, or says why not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import ROOT
from fsdpspec.validate import check_file

pytest.importorskip("accelerate")

from accelerate.commands.config.config_args import load_config_from_file  # noqa: E402
from accelerate.commands.launch import _validate_launch_command, launch_command_parser  # noqa: E402
from accelerate.utils.launch import prepare_multi_gpu_env  # noqa: E402

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
PRECISIONS = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


def _exported(cli, spec: Path, out: Path, *overrides: str) -> Path:
    sets = [arg for o in overrides for arg in ("--set", o)]
    result = cli("export", "accelerate", str(spec), *sets, "-o", str(out))
    assert result.returncode == 0, result.stderr
    return out


def _launch_env(config: Path) -> dict[str, str]:
    """What `accelerate launch --config_file CONFIG train.py` hands the processes."""
    args = launch_command_parser().parse_args(["--config_file", str(config), "train.py"])
    args, _, _ = _validate_launch_command(args)
    return prepare_multi_gpu_env(args)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_loads_and_launches(cli, tmp_path: Path, example: Path) -> None:
    config = _exported(cli, example, tmp_path / "accelerate.yaml")
    loaded = load_config_from_file(str(config))
    assert loaded.distributed_type == "FSDP"
    # fp8: a float8 spec, as accelerate's torchao backend (AO) runs it.
    assert loaded.mixed_precision in ("no", "bf16", "fp16", "fp8")
    env = _launch_env(config)
    assert env["ACCELERATE_USE_FSDP"] == "true"
    assert env["ACCELERATE_MIXED_PRECISION"] == loaded.mixed_precision


@pytest.mark.parametrize("shorthand", list(PRECISIONS))
def test_each_precision_reaches_accelerate_as_its_word(cli, tmp_path: Path,
                                                       shorthand: str) -> None:
    config = _exported(cli, ROOT / "examples" / "llama3-8b-h100.yaml",
                       tmp_path / "accelerate.yaml", f"fsdp.mixed_precision={shorthand}")
    # `mixed_precision: no` unquoted is False to PyYAML, and accelerate launch then fails
    # with "'bool' object has no attribute 'lower'".
    assert load_config_from_file(str(config)).mixed_precision == PRECISIONS[shorthand]
    env = _launch_env(config)
    assert env["ACCELERATE_MIXED_PRECISION"] == PRECISIONS[shorthand]
    assert env["FSDP_VERSION"] == "2"


def test_fsdp2_plugin_reads_the_launch_environment(cli, tmp_path: Path, monkeypatch) -> None:
    from accelerate.utils import FullyShardedDataParallelPlugin

    config = _exported(cli, ROOT / "examples" / "quickstart.yaml", tmp_path / "a.yaml")
    for key, value in _launch_env(config).items():
        monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert os.environ["FSDP_TRANSFORMER_CLS_TO_WRAP"] == "LlamaDecoderLayer"


@pytest.mark.parametrize("config", sorted((ROOT / "tests" / "accelerate").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_imported_configs_validate(cli, tmp_path: Path, config: Path) -> None:
    spec = tmp_path / "job.yaml"
    assert cli("import", "accelerate", str(config), "-o", str(spec)).returncode == 0
    errors = [d.code for d in check_file(spec).diagnostics if d.is_error]
    # FSDP1 flat parameters (fsdp_use_orig_params: false) over 4 hybrid shard groups: torch
    # fails at the first checkpoint, under accelerate as under fsdpspec.
    assert errors == (["FS904"] if config.stem == "fsdp1-hybrid-multinode-strings" else [])


def test_import_raises_the_host_guess_and_names_a_model_that_does_not_fit(
        cli, tmp_path: Path) -> None:
    config = tmp_path / "one-gpu.yaml"
    config.write_text("""\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_offload_params: true
  fsdp_sharding_strategy: FULL_SHARD
mixed_precision: bf16
num_processes: 2
""")
    spec = tmp_path / "job.yaml"
    result = cli("import", "accelerate", str(config), "-o", str(spec))
    assert result.returncode == 0, result.stderr
    # Offloading llama3-8b needs more host RAM than the 128 GiB per GPU we guess: the
    # guess is raised (and says so), so no FS203 blames the user's config for it.
    assert "host_memory_gib: 256" in spec.read_text()
    assert not check_file(spec).has_errors
    config.write_text(config.read_text().replace("fsdp_offload_params: true",
                                                 "fsdp_offload_params: false"))
    result = cli("import", "accelerate", str(config), "-o", str(spec), "--force")
    assert "the model llama3-8b does not fit 2 × H100-80GB as configured" in result.stderr
    assert [d.code for d in check_file(spec).diagnostics if d.is_error] == ["FS201"]


def test_an_fsdp2_hybrid_export_reaches_accelerate_as_its_mesh(cli, tmp_path: Path) -> None:
    """HYBRID_SHARD under FSDP2 is accelerate's parallelism_config, which its launcher
    turns into the 2-D mesh sizes (a strategy name would be ignored)."""
    config = _exported(cli, ROOT / "examples" / "llama3-8b-h100.yaml", tmp_path / "a.yaml",
                       "fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=4",
                       "fsdp.version=2")
    env = _launch_env(config)
    assert env["FSDP_VERSION"] == "2" and env["FSDP_RESHARD_AFTER_FORWARD"] == "true"
    # the example's 8 GPUs: two replicas of 4-rank shard groups
    assert env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "4"
    assert env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == "2"
