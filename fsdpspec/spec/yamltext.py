"""YAML text from round-trip data (ruamel CommentedMap), comments kept: the one writer
for the YAML fsdpspec prints (import, show). Values go through the emitter's own
quoting and comments through ``one_line``, so no text a value or comment holds can end
a line, open a key or reach a terminal as a control character."""

from __future__ import annotations

import io
import re
from typing import Any

from ruamel.yaml import YAML

COMMENT_COLUMN = 36
# The longest comment written: a comment quoting a source value is shortened to it.
MAX_COMMENT_CHARS = 160
# Plain scalars a YAML 1.1 reader (PyYAML, and so accelerate) takes for a boolean or null,
# though YAML 1.2 reads them as strings: `mixed_precision: no` would reach accelerate
# as False.
_YAML11_NOT_STRINGS = re.compile(r"(?i:y|yes|n|no|true|false|on|off|null|~)?")


def one_line(text: str, limit: int = MAX_COMMENT_CHARS) -> str:
    """``text`` as one line of printable characters, at most ``limit`` long: each
    character Python does not print (newlines, NEL, line and paragraph separators, ESC,
    NUL, surrogates …) written as its escape, the rest cut with an ellipsis."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def add_comment(node: Any, key: str, text: str) -> None:
    """An end-of-line comment after ``key`` of the mapping ``node``."""
    node.yaml_add_eol_comment(one_line(text), key, column=COMMENT_COLUMN)


def set_header(document: Any, *lines: str) -> None:
    """Comment lines before the document's first key."""
    document.yaml_set_start_comment("\n".join(one_line(line, 200) for line in lines))


def _represent_str(representer: Any, value: str) -> Any:
    if not value.isprintable():
        # Double quotes are the one YAML style that escapes every character (a plain or
        # single-quoted NEL or line separator is read back as a line break).
        return representer.represent_scalar("tag:yaml.org,2002:str", value, style='"')
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
