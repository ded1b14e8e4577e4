"""Issue 29, the importers: a source value never becomes a spec field it did not map to
(the import writes a document through the YAML emitter; its comments are escaped), the
spec an import writes is valid or not written (FS054 names the source key and line),
and every hostile value is one line, never a traceback. The attack files are
tests/convert/hostile/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from fuzz_imports import printable_lines

from fsdpspec.cli.main import cli
from fsdpspec.spec.load import load_file

HOSTILE = Path(__file__).parent / "hostile"


def _ids(value) -> str:
    """A case's id: short (a case may hold 5000 digits)."""
    return str(value)[:24].replace("\n", " ")


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _keys(node, prefix: str = "") -> set[str]:
    if not isinstance(node, dict):
        return set()
    return {f"{prefix}{k}" for k in node} | {
        key for k, v in node.items() for key in _keys(v, f"{prefix}{k}.")}


def test_a_planted_base_model_sets_no_slurm_setup_and_runs_nothing(tmp_path: Path) -> None:
    job, script = tmp_path / "job.yaml", tmp_path / "job.sh"
    source = HOSTILE / "axolotl-planted-slurm-setup.yaml"
    imported = _run("import", "axolotl", str(source), "-o", str(job))
    assert imported.exit_code == 0, imported.output
    assert printable_lines(imported.output)
    keys = _keys(load_file(job).data)
    assert not {k for k in keys if k.startswith(("launch", "lint"))}, keys
    assert ("# assumed: llama3-8b stands in for a Llama model of its family (dense): "
            "my-org/model\\nlaunch: {slurm:") in job.read_text()
    exported = _run("export", "slurm", str(job), "-o", str(script))
    assert exported.exit_code == 0, exported.output
    assert "PLANTED" not in script.read_text()


@pytest.mark.parametrize(("kind", "name"), [
    ("trainer", "trainer-planted-lint.json"),
    ("axolotl", "axolotl-planted-slurm-setup.yaml"),
    ("torchtitan", "torchtitan-planted-lint.toml"),
])
def test_a_planted_lint_ignore_is_no_field(kind: str, name: str, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    result = _run("import", kind, str(HOSTILE / name), "-o", str(job))
    assert result.exit_code == 0, result.output
    loaded = load_file(job)
    assert not loaded.diagnostics and "lint" not in loaded.data
    assert printable_lines(job.read_text())


HEAD = "distributed_type: FSDP\n"
LORA = "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_target_modules: [q_proj]\n"


@pytest.mark.parametrize(("kind", "name", "text", "expected"), [
    ("torchtitan", "a.toml", "[training]\nlocal_batch_size = -5\n",
     "2: FS054 [training] local_batch_size (data.micro_batch_size -5): must be ≥ 1, got "
     "integer -5"),
    ("accelerate", "a.yaml", HEAD + "num_machines: 0\nnum_processes: 2\n",
     "2: FS054 num_machines (resources.nodes 0): must be ≥ 1, got integer 0"),
    ("trainer", "a.sh", "torchrun --nproc_per_node 2 train.py --fsdp full_shard "
     "--gradient_accumulation_steps 0\n",
     "1: FS054 --gradient_accumulation_steps (data.global_batch_size 0): must be ≥ 1, got "
     "integer 0"),
    ("axolotl", "a.yaml", LORA + "lora_r: 8\nlora_alpha: 0\n",
     "5: FS054 lora_alpha (peft.alpha 0.0): must be > 0, got number 0.0"),
    ("axolotl", "a.yaml", LORA + "lora_r: 8\nlora_alpha: 16\nlora_dropout: 1.5\n",
     "6: FS054 lora_dropout (peft.dropout 1.5): must be < 1, got number 1.5"),
    ("torchtitan", "a.toml", "[checkpoint]\ninterval = inf\n",
     "2: FS054 [checkpoint] interval (checkpoint.interval_steps inf): expected integer, got "
     "number inf"),
    ("torchtitan", "a.toml", '[checkpoint]\ninterval = "500"\n',
     "2: FS054 [checkpoint] interval (checkpoint.interval_steps '500'): expected integer, "
     "got string '500'"),
    ("torchtitan", "a.toml", "[checkpoint]\nkeep_latest_k = 9223372036854775808\n",
     "2: FS054 [checkpoint] keep_latest_k (checkpoint.keep_last 9223372036854775808): must "
     "be ≤ 2147483647, got integer 9223372036854775808"),
    ("accelerate", "a.yaml", HEAD + "num_machines: 2\nnum_processes: 4\n"
     "main_process_ip: 'h;rm -rf /'\n",
     "4: FS054 main_process_ip (launch.rdzv_endpoint 'h;rm -rf /:29500'): string "
     "'h;rm -rf /:29500' is not host:port, the port from 1 to 65535"),
    ("trainer", "a.sh", "torchrun --nnodes 2 --nproc_per_node 2 --master_addr 'h`id`' "
     "train.py --fsdp full_shard\n",
     "1: FS054 --master_addr (launch.rdzv_endpoint 'h`id`:29500'): string 'h`id`:29500' is "
     "not host:port, the port from 1 to 65535"),
    ("accelerate", "a.yaml", HEAD + "num_machines: 2\nnum_processes: 4\n"
     "main_process_ip: node-0\nmain_process_port: 99999\n",
     "4: FS054 main_process_ip (launch.rdzv_endpoint 'node-0:99999'): string 'node-0:99999' "
     "is not host:port, the port from 1 to 65535"),
    ("accelerate", "a.yaml", HEAD + "num_machines: 2\nnum_processes: 4\n"
     "main_process_ip: node-0\nmain_process_port: 0\n",
     "4: FS054 main_process_ip (launch.rdzv_endpoint 'node-0:0'): string 'node-0:0' is not "
     "host:port, the port from 1 to 65535"),
], ids=_ids)
def test_a_value_the_spec_refuses_is_one_line_with_its_source_line(
    kind: str, name: str, text: str, expected: str, tmp_path: Path
) -> None:
    source, out = tmp_path / name, tmp_path / "out.yaml"
    source.write_text(text)
    result = _run("import", kind, str(source), "-o", str(out))
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output.splitlines() == [f"{source}:{expected}; nothing imported"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_twenty_thousand_layer_classes_are_refused_before_anything_is_planned(
    tmp_path: Path
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "nofamily", "architectures": ["NoFamilyForCausalLM"], "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
        "intermediate_size": 128, "max_position_embeddings": 256}))
    classes = ",".join(f"Layer{i}" for i in range(20_000))
    source = tmp_path / "a.yaml"
    source.write_text(f"{HEAD}fsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                      f"  fsdp_transformer_layer_cls_to_wrap: {classes}\n")
    result = _run("import", "accelerate", str(source), "--hf-config", str(model), "-o",
                  str(tmp_path / "out.yaml"))
    assert result.exit_code == 1, result.output
    [line] = result.output.splitlines()
    assert line.startswith(f"{source}:4: FS054 fsdp_transformer_layer_cls_to_wrap "
                           "(fsdp.transformer_layer_cls ['Layer0', 'Layer1'")
    assert re.search(r"…\): the spec would hold 200\d\d YAML nodes; a spec holds at most "
                     r"5000; nothing imported$", line), line
    assert not (tmp_path / "out.yaml").exists()


DEEP_JSON = '{"a":' * 5000 + "1" + "}" * 5000


@pytest.mark.parametrize(("kind", "name", "text", "expected"), [
    ("torchtitan", "a.toml", "x = " + "[" * 5000 + "]" * 5000 + "\n",
     "{source}: nested deeper than 32 levels"),
    ("torchtitan", "a.toml", "x = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n",
     "{source}: nested deeper than 32 levels"),
    ("torchtitan", "a.toml", "[" + ".".join(["a"] * 3000) + "]\n",
     "{source}: nested deeper than 32 levels"),
    ("torchtitan", "a.toml", "x = " + "9" * 5000 + "\n",
     "{source}: an integer of more than 4300 digits"),
    ("trainer", "a.sh", f"torchrun t.py --fsdp full_shard --fsdp_config '{DEEP_JSON}'\n",
     "{source}:1: --fsdp_config: nested deeper than 32 levels"),
], ids=_ids)
def test_an_unreadable_source_is_one_line(kind: str, name: str, text: str, expected: str,
                                          tmp_path: Path) -> None:
    source = tmp_path / name
    source.write_text(text)
    result = _run("import", kind, str(source), "-o", str(tmp_path / "out.yaml"))
    assert result.exit_code == 1 and not isinstance(result.exception, RecursionError)
    [line] = result.output.splitlines()
    assert line.startswith("Error: " + expected.format(source=source)), line
    assert line.endswith("; nothing imported")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


@pytest.mark.parametrize(("kind", "name", "text", "note"), [
    ("torchtitan", "a.toml", f'[training]\nlocal_batch_size = "{"9" * 5000}"\n',
     "2: [training] local_batch_size: '999"),
    ("trainer", "a.sh", "torchrun --nproc_per_node ² t.py --fsdp full_shard --seed ²\n",
     "1: --nproc_per_node ²: not a number of processes import can read; not imported"),
    ("trainer", "a.sh", "torchrun t.py --fsdp full_shard --seed ²\n",
     "1: --seed: '²' is not a whole number; not imported"),
    ("axolotl", "a.yaml", "warmup_ratio: 1e308\nmax_steps: 10\n",
     "1e+308 is not a fraction from 0 to 1; not imported"),
    ("trainer", "a.json", '{"fsdp": "full_shard", "warmup_ratio": 1e308, "max_steps": 10}',
     "1e+308 is not a fraction from 0 to 1; not imported"),
    ("axolotl", "a.yaml", "datasets:\n  - path: " + "d" * 300 + "\n    type: completion\n",
     "1: datasets[0] " + "d" * 300),
    # A name no file can have is a file not found: named (FS053), the rest imported.
    ("trainer", "a.sh", "torchrun t.py --fsdp full_shard --fsdp_config " + "x" * 300 + "\n",
     "1: FS053 --fsdp_config " + "x" * 100),  # the note is cut at 400 characters
], ids=_ids)
def test_a_value_no_reader_can_use_is_a_note(kind: str, name: str, text: str, note: str,
                                             tmp_path: Path) -> None:
    source = tmp_path / name
    source.write_text(text)
    result = _run("import", kind, str(source), "-o", str(tmp_path / "out.yaml"))
    assert result.exit_code == 0 and result.exception is None, result.output
    assert any(note in line for line in result.output.splitlines()), result.output
    assert all(len(line) <= 401 + len(str(source)) for line in result.output.splitlines())


def test_an_unhashable_compute_dtype_is_refused_by_name(tmp_path: Path) -> None:
    source = tmp_path / "a.yaml"
    source.write_text("base_model: meta-llama/Llama-3.2-1B\nadapter: qlora\nload_in_4bit: true\n"
                      "lora_target_modules: [q_proj]\nlora_r: 8\nlora_alpha: 16\n"
                      "bnb_config_kwargs:\n  bnb_4bit_compute_dtype: {a: [1]}\n")
    result = _run("import", "axolotl", str(source), "-o", str(tmp_path / "out.yaml"))
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output.splitlines() == [
        f"{source}:7: FS051 bnb_config_kwargs bnb_4bit_compute_dtype {{'a': [1]}} (a 4-bit "
        "base quantized otherwise): the spec cannot say this yet; nothing imported"]


@pytest.mark.parametrize("port", ["99999", "0"])
def test_a_port_out_of_range_fails_validate_and_export_accelerate(port: str,
                                                                   tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: job}\n"
                    "model: {preset: llama3.2-1b}\nresources: {nodes: 2, gpus_per_node: 1}\n"
                    f"launch: {{rdzv_endpoint: 'node-0:{port}'}}\n")
    validated = _run("validate", str(spec), "--format", "concise")
    assert validated.exit_code == 1
    assert f"{spec}:6:25: FS024 error string 'node-0:{port}' is not host:port, the port from " \
        "1 to 65535" in validated.output
    exported = _run("export", "accelerate", str(spec), "-o", str(tmp_path / "acc.yaml"))
    assert exported.exit_code == 1 and not (tmp_path / "acc.yaml").exists()
