"""Issue 42 §5: an import never writes what `fsdpspec validate` refuses, and never turns
a value into another. Each case at the shape the issue names, as a user types
`fsdpspec import KIND FILE`: a refusal is one line per value with the rule's code, the
source key and line, exit 1 and no file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsdpspec.cli.main import cli
from fsdpspec.validate import check_file


def _import(tmp_path: Path, kind: str, name: str, text: str, *extra: str):
    source = tmp_path / name
    source.write_text(text)
    out = tmp_path / "job.yaml"
    result = CliRunner().invoke(cli, ["import", kind, str(source), "-o", str(out), *extra])
    return source, out, result


def _refused(result, out: Path) -> list[str]:
    assert (result.exit_code, out.exists()) == (1, False), result.output
    return result.output.splitlines()


ACCELERATE = """\
distributed_type: FSDP
num_processes: 4
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
parallelism_config:
"""


@pytest.mark.parametrize("sizes, refused", [
    ("  parallelism_config_dp_shard_size: 4\n  parallelism_config_tp_size: 0\n",
     [(8, "parallelism_config_tp_size 0")]),
    ("  parallelism_config_dp_shard_size: 4\n  parallelism_config_cp_size: 0\n",
     [(8, "parallelism_config_cp_size 0")]),
    ("  parallelism_config_tp_size: -2\n  parallelism_config_cp_size: -2\n",
     [(7, "parallelism_config_tp_size -2"), (8, "parallelism_config_cp_size -2")]),
], ids=["tp0", "cp0", "minus-two-squared"])
def test_accelerate_sizes_below_one_are_refused_not_made_one(sizes: str, refused: list,
                                                             tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "accelerate", "acc.yaml", ACCELERATE + sizes)
    assert _refused(result, out) == [
        f"{source}:{line}: FS052 {what}: a size is at least 1 (accelerate stops on it); "
        "nothing imported" for line, what in refused]


def test_axolotl_tensor_parallel_3_on_4_gpus_is_fs176(tmp_path: Path) -> None:
    source, out, result = _import(
        tmp_path, "axolotl", "ax.yaml", "base_model: meta-llama/Llama-3.1-8B\n"
        "tensor_parallel_size: 3\nfsdp_version: 2\nfsdp_config:\n"
        "  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n", "--gpus-per-node", "4")
    assert f"{source}:2: FS176 tensor_parallel_size (parallelism.tensor_parallel 3): " \
        "tensor_parallel 3 × context_parallel 1 does not divide the world size 4; nothing " \
        "imported" in _refused(result, out)


def test_torchtitan_tensor_parallel_3_on_8_is_fs176(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "torchtitan", "tp3.toml",
                                  "[parallelism]\ntensor_parallel_degree = 3\n")
    assert f"{source}:2: FS176 [parallelism] tensor_parallel_degree " \
        "(parallelism.tensor_parallel 3): tensor_parallel 3 × context_parallel 1 does not " \
        "divide the world size 8; nothing imported" in _refused(result, out)


def test_torchtitan_tensor_parallel_2_with_context_parallel_4_is_fs195(tmp_path: Path) -> None:
    source, out, result = _import(
        tmp_path, "torchtitan", "tpcp.toml",
        "[parallelism]\ntensor_parallel_degree = 2\ncontext_parallel_degree = 4\n")
    assert _refused(result, out) == [
        f"{source}:3: FS195 [parallelism] context_parallel_degree "
        "(parallelism.context_parallel 4): context_parallel 4 with tensor_parallel 2 is not "
        "in this release; nothing imported"]


def test_a_bare_fsdp_config_json_gets_assumptions_that_fit(tmp_path: Path) -> None:
    """The Trainer's fsdp_config alone: HF's default micro-batch 8 at the spec's 2048
    tokens needs 84.2 GiB of the assumed model on any number of H100s; the sequence
    length, which no such file says, is assumed at the longest that fits."""
    _, out, result = _import(tmp_path, "trainer", "fsdp_config.json",
                             '{"fsdp_offload_params": false, "fsdp_sync_module_states": true}\n')
    assert result.exit_code == 0, result.output
    assert "seq_len: 1024                     # assumed (the source does not say): the " \
        "spec's default 2048 does not fit the GPUs" in out.read_text()
    assert [d.code for d in check_file(out).diagnostics if d.is_error] == []


TORCHRUN = ('torchrun --nproc_per_node=2 train.py --fsdp "full_shard auto_wrap" '
            "--bf16 True")


@pytest.mark.parametrize("script, line", [
    (f"#!/bin/bash\ncd /workspace/FastChat; {TORCHRUN}\n", 2),
    (f"#!/bin/bash\nexport WANDB_MODE=offline && {TORCHRUN}\n", 2),
    (f"#!/bin/bash\ncat > node.sh <<EOF\ntorchrun --nproc_per_node=8 other.py\nEOF\n"
     f"{TORCHRUN} > log.txt 2>&1 &\n", 5),
    (f"#!/bin/bash\nsrun bash <<'SCRIPT'\n{TORCHRUN}\nSCRIPT\n", 3),
], ids=["cd-semicolon", "export-and", "text-heredoc", "shell-heredoc"])
def test_the_launch_command_is_read_where_it_is(script: str, line: int,
                                                tmp_path: Path) -> None:
    _, out, result = _import(tmp_path, "trainer", "train.sh", script)
    assert result.exit_code == 0, result.output
    assert f"gpus_per_node: 2                  # torchrun (line {line})" in out.read_text()


@pytest.mark.parametrize("kind", ["fifo", "device", "symlink-loop"])
def test_an_unreadable_fsdp_config_is_named_with_why(kind: str, tmp_path: Path) -> None:
    config = {"fifo": tmp_path / "fsdp.json", "device": Path("/dev/zero"),
              "symlink-loop": tmp_path / "fsdp.json"}[kind]
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "symlink-loop":
        config.symlink_to(config.name)
    source, out, result = _import(tmp_path, "trainer", "train.sh",
                                  f"#!/bin/bash\n{TORCHRUN} --fsdp_config {config}\n")
    why = {"fifo": f"{config} is a FIFO, device or socket, not a regular file",
           "device": "/dev/zero is a FIFO, device or socket, not a regular file",
           "symlink-loop": f"cannot read {config}: Too many levels of symbolic links"}[kind]
    assert _refused(result, out) == [
        f"Error: {source}:2: --fsdp_config: {why}; nothing imported"]


@pytest.mark.parametrize("digits", ["9" * 5000, "0x" + "f" * 5000],
                         ids=["decimal", "hexadecimal"])
def test_a_5000_digit_toml_integer_is_one_line(digits: str, tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "torchtitan", "big.toml",
                                  f"[parallelism]\ntensor_parallel_degree = {digits}\n")
    lines = _refused(result, out)
    assert len(lines) == 1 and lines[0].startswith(f"Error: {source}: an integer of more "), lines
