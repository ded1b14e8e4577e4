"""`validate --format sarif` and `--format github`, checked through the real CLI."""

from __future__ import annotations

import json
import re

from conftest import CASES, ROOT, run_cli
from fsdpspec.diagnostic_formats.github import annotation
from fsdpspec.lint import RULES
from fsdpspec.validate import check_file

# Relative to ROOT, where run_cli runs: SARIF URIs are relative to the checkout.
INVALID = (CASES / "invalid").relative_to(ROOT)
FILES = [str(INVALID / name) for name in (
    "many-errors.yaml",                          # schema errors (FS0xx)
    "lint-FS501-written-micro-batch.yaml",       # two lint rules
    "lint-FS111-hf-config-mistral.yaml",         # a local config.json
)]
ANNOTATION = re.compile(
    r"^::(error|warning|notice) file=[^,:]+,line=\d+,col=\d+,endLine=\d+,endColumn=\d+,"
    r"title=FS\d{3}::\S.*$")


def _diagnostics(*files: str) -> list[dict]:
    result = run_cli("validate", "--format", "json", *files)
    return [d for f in json.loads(result.stdout)["files"] for d in f["diagnostics"]]


def test_sarif_structure() -> None:
    result = run_cli("validate", "--format", "sarif", *FILES)
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["version"] == "2.1.0"
    assert document["$schema"].endswith("sarif-2.1.0.json")
    [run] = document["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert run["tool"]["driver"]["name"] == "fsdpspec"
    ids = [r["id"] for r in rules]
    assert ids[:len(RULES)] == sorted(RULES) and len(ids) == len(set(ids))
    for descriptor in rules[:len(RULES)]:
        rule = RULES[descriptor["id"]]
        assert descriptor["name"] == rule.name
        assert descriptor["shortDescription"]["text"] == rule.summary
        assert descriptor["help"]["text"] == rule.hint
        assert "FAIL:" in descriptor["help"]["markdown"]
    # load and schema checks (FS0xx) point at the command and the page that explain them
    codes_page = (ROOT / "docs" / "codes.md").read_text()
    assert rules[len(RULES):], "many-errors.yaml gives FS0xx checks"
    for descriptor in rules[len(RULES):]:
        code = descriptor["id"]
        assert descriptor["help"]["text"].startswith(f"fsdpspec explain {code};")
        assert f"| {code} |" in codes_page
        assert run_cli("explain", code).returncode == 0

    expected = _diagnostics(*FILES)
    results = run["results"]
    assert [r["ruleId"] for r in results] == [d["code"] for d in expected]
    for result_, diagnostic in zip(results, expected, strict=True):
        assert rules[result_["ruleIndex"]]["id"] == result_["ruleId"]
        assert result_["level"] == {"info": "note"}.get(diagnostic["severity"],
                                                        diagnostic["severity"])
        assert result_["message"]["text"].startswith(diagnostic["message"])
        [location] = result_["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"] == diagnostic["file"]
        assert physical["region"] == {
            "startLine": diagnostic["line"], "startColumn": diagnostic["col"],
            "endLine": diagnostic["end_line"], "endColumn": diagnostic["end_col"]}


def test_sarif_places_a_set_flag_problem_on_the_file_without_a_region() -> None:
    case = str(INVALID / "lint-FS901-set-flag.yaml")
    result = run_cli("validate", "--format", "sarif", case, "--set",
                     "fsdp.forward_prefetch=true")
    [finding] = json.loads(result.stdout)["runs"][0]["results"]
    assert finding["ruleId"] == "FS901" and finding["level"] == "warning"
    assert finding["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": case}}
    assert finding["message"]["text"].startswith("--set fsdp.forward_prefetch=true: ")


def test_github_one_annotation_per_diagnostic() -> None:
    result = run_cli("validate", "--format", "github", *FILES)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    expected = _diagnostics(*FILES)
    assert len(lines) == len(expected) > 3
    for line, diagnostic in zip(lines, expected, strict=True):
        assert ANNOTATION.match(line), line
        assert (f"file={diagnostic['file']},line={diagnostic['line']},col={diagnostic['col']},"
                f"endLine={diagnostic['end_line']},endColumn={diagnostic['end_col']},"
                f"title={diagnostic['code']}::") in line


def test_github_escapes_what_would_end_the_command(tmp_path) -> None:
    spec = tmp_path / "a,b:c%.yaml"
    spec.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: j}\n"
                    "model: {preset: tiny-llama}\ndata: {seq_len: 64, global_batch_size: 1}\n"
                    "optimizer: {lr: 0.5}\n")
    report = check_file(spec)
    [finding] = report.diagnostics
    line = annotation(report, finding)
    assert "a%2Cb%3Ac%25.yaml,line=6," in line
    assert "\n" not in line and "%0Ahelp: check the exponent" in line
