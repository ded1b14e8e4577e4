"""`fsdpspec import accelerate` on hostile configs (issue 11, item 4): lists, dicts,
huge ints, unicode digits, tags or a non-mapping fsdp_config stop the import with one
line naming the key and nothing written; a value fsdpspec does not know is a note."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli

HEAD = "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\n"


@pytest.mark.parametrize(("text", "key"), [
    (HEAD + "fsdp_config:\n  fsdp_auto_wrap_policy: [1]\n", "fsdp_auto_wrap_policy"),
    (HEAD + "fsdp_config:\n  fsdp_sharding_strategy: {a: 1}\n", "fsdp_sharding_strategy"),
    (HEAD + "fsdp_config:\n  fsdp_sharding_strategy: '٣'\n", "fsdp_sharding_strategy"),
    (HEAD + "fsdp_config:\n  fsdp_min_num_params: " + "9" * 40 + "\n", "fsdp_min_num_params"),
    (HEAD + "fsdp_config:\n  fsdp_version: [2]\n", "fsdp_version"),
])
def test_a_malformed_value_is_one_line_naming_the_key_and_writes_nothing(
    text: str, key: str, tmp_path: Path
) -> None:
    (tmp_path / "a.yaml").write_text(text)
    result = run_cli("import", "accelerate", "a.yaml", "-o", "out.yaml", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"a.yaml:5: FS052 {key} is "), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml"]


def test_a_value_fsdpspec_does_not_know_is_a_note_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(HEAD + "fsdp_config:\n  fsdp_sharding_strategy: NOPE\n")
    result = run_cli("import", "accelerate", "a.yaml", cwd=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr
    notes = [line for line in result.stderr.splitlines() if "fsdp_sharding_strategy" in line]
    assert len(notes) == 1 and notes[0].startswith("a.yaml:5: ") and "not imported" in notes[0]


@pytest.mark.parametrize("text", [
    HEAD + "fsdp_config: [1, 2]\n",
    HEAD + "fsdp_config: FULL_SHARD\n",
    HEAD + "fsdp_config:\n  fsdp_version: !!python/object:os.system 2\n",
    HEAD + "num_processes: " + "9" * 5000 + "\n",
])
def test_an_unusable_config_is_one_line_and_writes_nothing(text: str, tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(text)
    result = run_cli("import", "accelerate", "a.yaml", "-o", "out.yaml", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml"]


@pytest.mark.parametrize(("kind", "name", "content"), [
    ("torchtitan", "a.toml", b"[training\nsteps = 1\n"),
    ("torchtitan", "a.toml", b"[parallelism]\ndata_parallel_shard_degree = 'x'\n"),
    ("torchtitan", "a.toml", b"\xff\xfe[job]\n"),
    ("torchtitan", "a.toml", b"x = 1\n" * 200_000),
    ("axolotl", "a.yaml", b"- base_model\n"),
    ("axolotl", "a.yaml", b"fsdp: [[full_shard]]\nfsdp_config: {fsdp_version: 2}\n"),
    ("axolotl", "a.yaml", b"fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: [1]\n"),
    ("trainer", "a.json", b'["--fsdp", "full_shard"]'),
    ("trainer", "a.sh", b"torchrun train.py --fsdp 'full_shard\n"),
    ("trainer", "a.sh", b"torchrun a.py\ntorchrun b.py\n"),
    # found by mutating every value of the corpus files (tests/convert/configs)
    ("axolotl", "a.yaml", b"dp_shard_size: '4'\ndp_replicate_size: 2\n"),
    ("axolotl", "a.yaml", b"tensor_parallel_size: '2'\nfsdp_version: 2\n"),
    ("axolotl", "a.yaml", b"fsdp: true\n"),
    ("torchtitan", "a.toml", b"[parallelism]\ntensor_parallel_degree = '8'\n"),
])
def test_a_bad_source_of_any_kind_is_one_line_and_writes_nothing(
    kind: str, name: str, content: bytes, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    source = tmp_path / name
    source.write_bytes(content)
    result = CliRunner().invoke(cli, ["import", kind, str(source), "-o",
                                      str(tmp_path / "out.yaml")])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(source) in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


@pytest.mark.parametrize(("kind", "name", "content", "note"), [
    ("axolotl", "a.yaml", "attn_implementation: [sdpa]\n", "a.yaml:1: attn_implementation"),
    ("torchtitan", "a.toml", "[checkpoint]\nexport_dtype = []\n",
     "a.toml:2: [checkpoint] export_dtype"),
    ("torchtitan", "a.toml", "[training]\nmixed_precision_param = {a = 1}\n",
     "a.toml:2: mixed precision dtypes"),
    # fuzz.py: digits as a string went to int(), which refuses more than 4300 (ValueError).
    ("accelerate", "a.yaml", f"{HEAD}num_machines: '{'9' * 5000}'\n",
     "a.yaml:4: num_machines: a number of 5000 digits is not a count"),
    # An fsdp_config file that is not there: named, and the rest imported (issue 33).
    ("trainer", "a.json", '{"fsdp": "full_shard", "fsdp_config": "missing.json"}',
     "a.json:1: FS053 fsdp_config missing.json: no such file beside a.json"),
    ("trainer", "a.sh", "torchrun t.py --fsdp full_shard --fsdp_config .\n",
     "a.sh:1: FS053 --fsdp_config .: no such file beside a.sh"),
])
def test_a_value_of_another_type_is_a_note_with_its_line(
    kind: str, name: str, content: str, note: str, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    (tmp_path / name).write_text(content)
    result = CliRunner().invoke(cli, ["import", kind, str(tmp_path / name), "-o",
                                      str(tmp_path / "out.yaml")])
    assert result.exit_code == 0 and result.exception is None, result.output
    assert f"{tmp_path}/{note}" in result.output
