"""docs/codes.md's table lists every lint rule (FS201–FS204 were once missing)."""

from __future__ import annotations

import re

from conftest import ROOT
from fsdpspec.lint import RULES


def test_the_code_table_lists_every_rule_code() -> None:
    listed = set(re.findall(r"^\| (FS\d{3}) \|", (ROOT / "docs" / "codes.md").read_text(), re.M))
    assert set(RULES) <= listed, sorted(set(RULES) - listed)
