"""YAML text from round-trip data (ruamel CommentedMap), comments kept: the one writer
for the YAML fsdpspec prints (import, show)."""

from __future__ import annotations

import io
import re
from typing import Any

from ruamel.yaml import YAML

COMMENT_COLUMN = 36
# Plain scalars a YAML 1.1 reader (PyYAML, and so accelerate) takes for a boolean or null,
# though YAML 1.2 reads them as strings: `mixed_precision: no` would reach accelerate
# as False.
_YAML11_NOT_STRINGS = re.compile(r"(?i:y|yes|n|no|true|false|on|off|null|~)?")


def _represent_str(representer: Any, value: str) -> Any:
    if _YAML11_NOT_STRINGS.fullmatch(value):
        return representer.represent_scalar("tag:yaml.org,2002:str", value, style="'")
    return representer.represent_str(value)


def dump_yaml(document: Any) -> str:
    """Block-style YAML with sequences indented under their key; strings that YAML 1.1
    would read as booleans or null are quoted, so every YAML reader gets a string."""
    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    # Spell null out: an empty value reads as a gap, not as "unset".
    yaml.representer.add_representer(
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    yaml.representer.add_representer(str, _represent_str)
    stream = io.StringIO()
    yaml.dump(document, stream)
    return stream.getvalue()
