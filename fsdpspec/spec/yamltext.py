"""YAML text from round-trip data (ruamel CommentedMap), comments kept: the one writer
for the YAML fsdpspec prints (import, show)."""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML

COMMENT_COLUMN = 36


def dump_yaml(document: Any) -> str:
    """Block-style YAML with sequences indented under their key."""
    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    # Spell null out: an empty value reads as a gap, not as "unset".
    yaml.representer.add_representer(
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    stream = io.StringIO()
    yaml.dump(document, stream)
    return stream.getvalue()
