"""The committed JSON Schema never drifts from the models, and it agrees with pydantic."""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from conftest import CASES, ROOT, run_cli
from fsdpspec.spec import LATEST
from fsdpspec.spec.generated import drifted
from fsdpspec.spec.load import load_file
from fsdpspec.spec.schema import generate, render, schema_filename
from fsdpspec.spec.v1 import JobSpec

SCHEMA_CASES = sorted((CASES / "valid").glob("*.yaml")) + sorted(
    (CASES / "invalid").glob("*.yaml")
)


def test_committed_schema_is_current() -> None:
    assert drifted() == []
    assert run_cli("schema", "--check").returncode == 0


def test_schema_check_fails_on_drift(tmp_path: Path) -> None:
    (tmp_path / schema_filename(LATEST)).write_text(render(LATEST).replace("Job name", "Nme"))
    assert drifted(tmp_path) == [str(tmp_path / schema_filename(LATEST))]


def test_every_field_has_a_description() -> None:
    schema = generate(LATEST)
    missing = [
        f"{name}.{prop}"
        for name, definition in schema["$defs"].items()
        for prop, body in definition.get("properties", {}).items()
        if not body.get("description")
    ]
    assert missing == []


def test_examples_declare_the_schema_for_editors() -> None:
    for example in (ROOT / "examples").glob("*.yaml"):
        first = example.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../schema/fsdpspec-v1.json", example


def _pydantic_accepts(data) -> bool:
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError:
        return False
    return spec is not None


@pytest.mark.parametrize("case", SCHEMA_CASES, ids=lambda p: p.parent.name + "/" + p.stem)
def test_jsonschema_and_pydantic_agree(case: Path) -> None:
    loaded = load_file(case)
    if loaded.data is None:
        pytest.skip("not a document: a loader matter, not a schema matter")
    validator = Draft202012Validator(generate(LATEST))
    schema_ok = validator.is_valid(loaded.data)
    # NaN/Inf cannot be expressed in JSON Schema; pydantic alone refuses them.
    if case.stem == "nan-lr":
        assert schema_ok and not _pydantic_accepts(loaded.data)
        return
    assert schema_ok == _pydantic_accepts(loaded.data)
