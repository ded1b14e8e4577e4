"""`--set KEY=VALUE` reads its value by the same rules as the file, and every malformed
flag is one line naming the flag, exit 2 (issue 11, item 2)."""

from __future__ import annotations

import pytest

from conftest import CASES, run_cli

SPEC = str(CASES / "valid" / "every-section.yaml")  # it has a list to index


@pytest.mark.parametrize(("flag", "reason"), [
    ("=1", "an empty key"),
    ("a..b=1", "has an empty part"),
    ("fsdp..version=2", "has an empty part"),
    ("fsdp.transformer_layer_cls.٣=x", "is not an index"),
    ("fsdp.transformer_layer_cls.²=x", "is not an index"),
    ("data.seq_len=!!int abc", "is not a valid !!int"),
    ("fsdp.cpu_offload=!!bool x", "is not a valid !!bool"),
    ("data.seq_len=!!python/object:os.system x", "is not allowed"),
    ("data.seq_len=[1", "YAML syntax error"),
    ("data.seq_len={a: 1", "YAML syntax error"),
    ('metadata.name="a\\0b"', "NUL"),
    ("data.seq_len=1e999", "overflows a float"),
    ("data.seq_len=" + "9" * 5000, "out of range"),
    ("data.seq_len=%YAML 1.3", "unsupported YAML version"),
    ("data.seq_len=" + "[" * 1000, "nesting deeper"),
    # fuzz.py: the suggested key was printed raw, so its newline broke the line.
    ("8\n.8\n=8\n", "set the whole list, e.g. --set '8\\n'=[…]"),
])
def test_a_malformed_flag_is_one_line_naming_the_flag(flag: str, reason: str) -> None:
    result = run_cli("validate", "--set", flag, SPEC)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: --set ") and reason in error, error
