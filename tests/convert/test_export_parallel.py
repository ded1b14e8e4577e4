"""`fsdpspec export accelerate` of tensor-parallel, context-parallel and float8 jobs, read
by REAL accelerate: its config loader, its launcher's environment, then the
ParallelismConfig, AORecipeKwargs and FSDP plugin each process builds from that
environment. The exported file imports back to the same degrees and float8 section.

Until tensor parallelism and float8 land, `validate` refuses them by name (FS169,
FS319, fsdpspec/lint/unbuilt.py) and the export stops there:
these tests then check that refusal and export through `export_config`, what the
command calls once the spec is valid; once a feature lands, through the command."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from conftest import ROOT
from fsdpspec.cli.main import cli as fsdpspec
from fsdpspec.cli.options import load_spec
from fsdpspec.convert.accelerate import export_config
from fsdpspec.lint.registry import RULES
from fsdpspec.validate import check_file

pytest.importorskip("accelerate")
pytest.importorskip("torchao")

from accelerate.commands.config.config_args import load_config_from_file  # noqa: E402
from accelerate.commands.launch import _validate_launch_command, launch_command_parser  # noqa: E402
from accelerate.utils.launch import prepare_multi_gpu_env  # noqa: E402

SPEC = ROOT / "examples" / "llama3-8b-h100.yaml"  # 8 GPUs on one node
PLACEHOLDERS = {"FS169": "parallelism.tensor_parallel", "FS319": "float8"}


def _export(sets: list[str], out: Path) -> tuple[Path, str]:
    """The accelerate config of the example with ``sets``, and the notes said."""
    args = [arg for s in sets for arg in ("--set", s)]
    result = CliRunner().invoke(fsdpspec, ["export", "accelerate", str(SPEC), *args,
                                           "-o", str(out)])
    waiting = sorted(code for code, field in PLACEHOLDERS.items()
                     if code in RULES and any(s.startswith(field) for s in sets))
    if not waiting:
        assert result.exit_code == 0, result.output
        return out, result.output
    assert result.exit_code == 1 and not out.exists(), result.output
    assert sorted({c for c in PLACEHOLDERS if f" {c} " in result.output}) == waiting
    report = load_spec(str(SPEC), sets)
    assert report.spec is not None
    config, notes = export_config(report.spec, ["LlamaDecoderLayer"])
    out.write_text(yaml.safe_dump(config))
    return out, "\n".join(notes)


def _launch_env(config: Path, monkeypatch) -> dict[str, str]:
    """What `accelerate launch --config_file CONFIG train.py` hands each process, set in
    this one."""
    args = launch_command_parser().parse_args(["--config_file", str(config), "train.py"])
    args, _, _ = _validate_launch_command(args)
    env = prepare_multi_gpu_env(args)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def _imported_back(config: Path, tmp_path: Path):
    out = tmp_path / "back.yaml"
    result = CliRunner().invoke(fsdpspec, ["import", "accelerate", str(config), "-o", str(out),
                                           "--preset", "llama3-8b"])
    assert result.exit_code == 0, result.output
    return check_file(out).spec


def test_hsdp_with_tensor_parallelism_is_accelerates_3d_mesh(tmp_path: Path,
                                                             monkeypatch) -> None:
    """accelerate's own tp_hsdp example: 2 replicas × 2-rank shard groups × TP 2."""
    from accelerate.parallelism_config import ParallelismConfig

    # Checkpointed, with bf16 moments: the 8B fits 2-rank shard groups by FSDP's own
    # split, also where the plan does not yet divide the layers by the TP degree.
    sets = ["fsdp.version=2", "fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=2",
            "parallelism.tensor_parallel=2", "fsdp.activation_checkpointing=full",
            "optimizer.state_dtype=bfloat16"]
    config, _ = _export(sets, tmp_path / "accelerate.yaml")
    assert load_config_from_file(str(config)).parallelism_config == {
        "parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 2, "parallelism_config_cp_size": 1}
    env = _launch_env(config, monkeypatch)
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
    mesh = ParallelismConfig()  # as each process reads it from the launch environment
    assert (mesh.dp_replicate_size, mesh.dp_shard_size, mesh.tp_size, mesh.cp_size) == (
        2, 2, 2, 1)
    assert mesh.total_size == int(load_config_from_file(str(config)).num_processes) == 8
    back = _imported_back(config, tmp_path)
    assert (back.parallelism.tensor_parallel, back.fsdp.sharding_strategy,
            back.fsdp.shard_group_size, back.world_size) == (2, "HYBRID_SHARD", 2, 8)


def test_float8_with_context_parallelism_is_torchao_fp8(tmp_path: Path, monkeypatch) -> None:
    """CP 2 beside 4-rank FSDP, float8 tensorwise without the float8 all-gather."""
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import AORecipeKwargs, FullyShardedDataParallelPlugin

    # Ring attention takes no per-example mask: the example's chat data goes as text (FS194).
    sets = ["fsdp.version=2", "parallelism.context_parallel=2", "data.format=text",
            "float8={recipe: tensorwise, fsdp_all_gather: false}"]
    config, notes = _export(sets, tmp_path / "accelerate.yaml")
    # accelerate stops on torchao with FSDP2 and cpu_ram_efficient_loading (the spec's
    # default): the export writes it off and says so.
    assert "cpu_ram_efficient_loading true: accelerate refuses it" in notes
    loaded = load_config_from_file(str(config))
    assert loaded.mixed_precision == "fp8" and loaded.fp8_config["backend"] == "AO"
    env = _launch_env(config, monkeypatch)
    assert (env["ACCELERATE_MIXED_PRECISION"], env["ACCELERATE_FP8_BACKEND"]) == ("fp8", "AO")
    mesh = ParallelismConfig()
    assert (mesh.dp_replicate_size, mesh.dp_shard_size, mesh.cp_size, mesh.total_size) == (
        1, 4, 2, 8)
    assert AORecipeKwargs().config.enable_fsdp_float8_all_gather is False
    assert FullyShardedDataParallelPlugin().cpu_ram_efficient_loading is False
    back = _imported_back(config, tmp_path)
    assert (back.parallelism.context_parallel, back.float8.recipe, back.float8.exclude,
            back.float8.fsdp_all_gather, back.fsdp.mixed_precision.param_dtype) == (
        2, "tensorwise", ["lm_head"], False, "bfloat16")
