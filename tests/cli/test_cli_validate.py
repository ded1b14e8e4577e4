"""`fsdpspec validate` as a user runs it: formats, exit codes, --set, imports."""

from __future__ import annotations

import json

from conftest import CASES, ROOT, run_cli

INVALID = CASES / "invalid"
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


def test_clean_file_exits_0_and_several_files_are_checked() -> None:
    result = run_cli("validate", *(str(p) for p in sorted((ROOT / "examples").glob("*.yaml"))))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_typo_is_placed_and_the_fix_suggested() -> None:
    case = str(INVALID / "enum-typo.yaml")
    result = run_cli("validate", "--format", "full", case)
    assert result.returncode == 1
    assert f"{case}:7:22: error[FS023]" in result.stdout
    assert "7 |   sharding_strategy: FULL_SHARDD" in result.stdout
    assert "  |                      ^^^^^^^^^^^" in result.stdout
    assert "help: did you mean 'FULL_SHARD'?" in result.stdout


def test_concise_format_is_one_line_per_problem() -> None:
    case = str(INVALID / "many-errors.yaml")
    lines = run_cli("validate", "--format", "concise", case).stdout.splitlines()
    assert lines[0] == f"{case}:7:18: FS024 error must be ≥ 1, got integer -1"
    assert [line.split(": ")[1].split()[0] for line in lines] == [
        "FS024", "FS023", "FS020", "FS022"]


def test_json_format() -> None:
    result = run_cli("validate", "--format", "json", QUICKSTART, str(INVALID / "enum-typo.yaml"))
    document = json.loads(result.stdout)
    assert [f["valid"] for f in document["files"]] == [True, False]
    first = document["files"][1]["diagnostics"][0]
    assert (first["line"], first["col"], first["code"], first["path"]) == (
        7, 22, "FS023", "/fsdp/sharding_strategy")
    assert document["summary"] == {"errors": 2, "warnings": 0, "infos": 0}


def test_set_overrides_apply_and_bad_values_point_at_the_flag() -> None:
    ok = run_cli("validate", QUICKSTART, "--set", "fsdp.sharding_strategy=SHARD_GRAD_OP")
    assert ok.returncode == 0
    bad = run_cli("validate", "--format", "concise", QUICKSTART, "--set", "data.seq_len=long")
    assert bad.returncode == 1
    # The flag alone: a line and column after it would read as part of its value.
    assert bad.stdout.startswith("--set data.seq_len=long: FS022 error expected integer")


def test_usage_errors_exit_2_without_traceback() -> None:
    for args in (["validate"], ["validate", QUICKSTART, "--set", "novalue"],
                 ["validate", QUICKSTART, "--format", "xml"],
                 ["validate", QUICKSTART, "--set", "metadata.name.x=1"]):
        result = run_cli(*args)
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr
        assert "Error:" in result.stderr


def test_missing_file_is_a_diagnostic_not_a_crash() -> None:
    result = run_cli("validate", "--format", "concise", "no/such.yaml")
    assert result.returncode == 1
    assert result.stdout == "no/such.yaml:1:1: FS001 error no such file: no/such.yaml\n"


def test_validate_imports_neither_torch_nor_transformers() -> None:
    probe = (
        "import sys\n"
        "from fsdpspec.cli.main import cli\n"
        "try:\n"
        f"    cli(['validate', {QUICKSTART!r}, {str(INVALID / 'many-errors.yaml')!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "print('HEAVY', heavy)\n"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=ROOT).stdout
    assert "HEAVY []" in out


def test_set_into_a_section_the_file_lacks_points_at_the_flag() -> None:
    minimal = str(CASES / "valid" / "minimal.yaml")  # no resources section
    result = run_cli("validate", "--format", "concise", minimal,
                     "--set", "resources.accelerator.memory_gib=80")
    assert result.returncode == 1
    flag = "--set resources.accelerator.memory_gib=80"
    assert result.stdout.startswith(f"{flag}: ")
    missing_index = run_cli("validate", QUICKSTART, "--set", "optimizer.betas.1=0.5")
    assert missing_index.returncode == 2
    assert "set the whole list, e.g. --set optimizer.betas=[…]" in missing_index.stderr


def test_a_fifo_is_refused_not_read(tmp_path) -> None:
    import os

    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    result = run_cli("validate", "--format", "concise", str(fifo), timeout=10)
    assert result.stdout == f"{fifo}:1:1: FS001 error {fifo} is not a regular file\n"
