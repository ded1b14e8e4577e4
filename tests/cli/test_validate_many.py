"""`fsdpspec validate FILE…` with a hundred files in one call: one process answers for
every file, each at its own path (the time against one file is
`benchmarks/cli_latency.py`'s, not a test's)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def test_a_hundred_files_in_one_call_each_answered_at_its_own_path(tmp_path: Path) -> None:
    files = [shutil.copy(QUICKSTART, tmp_path / f"job-{i:03}.yaml") for i in range(100)]
    broken = tmp_path / "job-050.yaml"
    broken.write_text(QUICKSTART.read_text().replace("global_batch_size:", "global_batch:"))
    result = run_cli("validate", "--format", "json", *map(str, files))
    assert result.returncode == 1, result.stderr
    reports = json.loads(result.stdout)["files"]
    assert [r["file"] for r in reports] == list(map(str, files))
    assert [r["file"] for r in reports if not r["valid"]] == [str(broken)]
    (wrong,) = [d for r in reports for d in r["diagnostics"] if d["severity"] == "error"]
    assert (wrong["file"], wrong["code"]) == (str(broken), "FS020")
    assert wrong["message"] == "unknown field 'global_batch' in data"


def _imported(result) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
            if line.startswith("import time:")}


def test_one_file_is_read_without_libyaml_and_many_with_it(tmp_path: Path) -> None:
    """PyYAML's import costs more than libyaml saves on one spec: `validate job.yaml`
    never imports it; a second file in the same call is read by libyaml."""
    profile = {"PYTHONPROFILEIMPORTTIME": "1"}
    one = run_cli("validate", str(QUICKSTART), env=profile)
    two = run_cli("validate", str(QUICKSTART), str(QUICKSTART), env=profile)
    assert (one.returncode, two.returncode) == (0, 0), one.stderr + two.stderr
    assert "yaml._yaml" not in _imported(one) and "ruamel.yaml" in _imported(one)
    assert "yaml._yaml" in _imported(two)


def test_validate_and_plan_import_pydantic_core_not_pydantic() -> None:
    """The sections validate with pydantic-core and the shipped schemas: pydantic's
    import and model building (half of `validate`'s time) stay out of both commands. One
    spec read, no PyYAML either: the `--set` values plan tries are not specs."""
    profile = {"PYTHONPROFILEIMPORTTIME": "1"}
    for argv in (("validate", str(QUICKSTART)),
                 ("plan", str(ROOT / "examples" / "llama3-8b-h100.yaml"))):
        result = run_cli(*argv, env=profile)
        assert result.returncode == 0, result.stderr
        modules = _imported(result)
        assert "pydantic_core" in modules
        assert not {m for m in modules if m == "pydantic" or m.startswith("pydantic.")}
        assert "yaml._yaml" not in modules


_FS402 = (ROOT / "tests" / "cases" / "invalid" / "lint-FS402-keep-last-zero.yaml").read_text()
# Issue 42: text the fast path (libyaml) and ruamel read apart. ruamel decides, so each
# file says the same wherever it stands in the call: (its text, ruamel's first line).
_READ_APART = {
    # libyaml ended the comment at U+2028 and read a live `lint:` that silenced FS402
    "comment": (_FS402 + "# note\u2028lint: {ignore: [FS402]}\n",
                "16:8: FS004 error YAML syntax error: expected <block end>, but found "
                "'<block mapping start>'"),
    # libyaml read two items, ruamel one (which matches no rule)
    "item": (_FS402.replace("lint-fs402-fail", "Bad_Name")
             + "lint:\n  ignore:\n  - FS150\u2028  - FS402\n",
             "5:9: FS150 warning metadata.name 'Bad_Name' is not a Kubernetes name"),
    # libyaml read a pair (FS022), ruamel refuses the flow sequence (FS004)
    "quoted pairs": (_FS402 + 'lint: {ignore: ["FS402":"FS150"]}\n',
                     "16:24: FS004 error YAML syntax error: expected ',' or ']', but got "
                     "'<scalar>'"),
    # libyaml counted U+2028 / U+2029 as a line break and a BOM as a column
    "position after U+2028": (_FS402.replace(
        "  name: lint-fs402-fail", "  name: lint-fs402-fail\n  description: 'a\u2028b'"),
        "16:14: FS402 warning keep_last 0 keeps all 10 checkpoints of the run"),
    "position after U+2029": (_FS402.replace(
        "  name: lint-fs402-fail", "  name: lint-fs402-fail\n  description: 'a\u2029b'"),
        "16:14: FS402 warning keep_last 0 keeps all 10 checkpoints of the run"),
    "position after a BOM": (_FS402.replace(
        "metadata:\n  name: lint-fs402-fail", "metadata: {description: a\ufeffb, name: Bad_Name}"),
        "4:35: FS150 warning metadata.name 'Bad_Name' is not a Kubernetes name"),
}


@pytest.mark.parametrize("case", sorted(_READ_APART))
def test_a_file_says_the_same_first_or_second(tmp_path: Path, case: str) -> None:
    text, first_line = _READ_APART[case]
    hostile, other = tmp_path / "a.yaml", tmp_path / "b.yaml"
    hostile.write_text(text, encoding="utf-8")
    shutil.copy(QUICKSTART, other)
    said = []
    for files in ((hostile, other), (other, hostile)):
        result = run_cli("validate", "--format", "concise", *map(str, files))
        assert result.returncode in (0, 1), result.stderr
        said.append([line.removeprefix(f"{hostile}:") for line in result.stdout.splitlines()
                     if line.startswith(f"{hostile}:")])
    assert said[0] == said[1]
    assert said[0][0] == first_line
