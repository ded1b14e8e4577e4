"""Other tools' config files read as positioned plain data: YAML (the spec loader), JSON
(bounded as a model's config.json is), TOML (tomllib, bounded) and one launch command of
a shell script (shlex). Every reader is total: a file it cannot use is one SourceError
line naming the file (and the line where there is one), never a traceback."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdpspec.catalog.configjson import CONFIG_LIMITS, ConfigJsonError, load_object, read_bytes
from fsdpspec.jsonfile import JsonFileError, check_shape, parse
from fsdpspec.spec.load import join, load_file


class SourceError(ValueError):
    """The file cannot be imported; the message is one line, starting with the file."""


@dataclass
class Document:
    """A config's plain data and the 1-based line of each key, by JSON pointer."""

    file: str
    data: dict[str, Any]
    lines: dict[str, int] = field(default_factory=dict)

    def line(self, pointer: str) -> int | None:
        return self.lines.get(pointer)


def named_file_exists(path: Path) -> bool:
    """Whether a file a config names exists: False, not an error, for a name no file can
    have (ENAMETOOLONG, a NUL), as for a missing one; reading it then says why."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def read_yaml(path: Path) -> Document:
    """A YAML mapping through fsdpspec's own bounded loader (size, depth, aliases,
    duplicate keys and tags are refused there)."""
    loaded = load_file(path)
    if loaded.diagnostics:
        first = loaded.diagnostics[0]
        where = f"{first.file}:{first.position.line}" if first.position else str(path)
        raise SourceError(f"{where}: {first.message}")
    if not isinstance(loaded.data, dict):
        raise SourceError(f"{path}: the config is not a mapping of keys")
    lines = {pointer: position.line for pointer, position in loaded.source_map.keys.items()}
    return Document(str(path), loaded.data, lines)


_JSON_KEY = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:')


def _json_key_lines(text: str) -> dict[str, int]:
    """The line of every object key, by pointer: a scan that follows strings, objects
    and arrays (json has already accepted the text, so it is well formed)."""
    lines: dict[str, int] = {}
    stack: list[str] = []  # pointer of each open container
    pending = ""  # pointer of the value about to start
    index, line = 0, 1
    while index < len(text):
        char = text[index]
        if char == '"':
            match = _JSON_KEY.match(text, index)
            if match and (not stack or not stack[-1].endswith("[]")):
                key = json.loads(f'"{match.group(1)}"')
                pending = join(stack[-1] if stack else "", key)
                lines[pending] = line
                line += match.group(0).count("\n")
                index = match.end()
                continue
            end = re.compile(r'"((?:[^"\\]|\\.)*)"').match(text, index)
            index = end.end() if end else index + 1
            continue
        if char == "[":
            stack.append(pending + "[]")
        elif char == "{":
            # an object inside an array has no key: its own keys are left out
            inside_array = bool(stack) and stack[-1].endswith("[]")
            stack.append(stack[-1] + "/[]" if inside_array else pending)
        elif char in "}]" and stack:
            stack.pop()
        elif char == "\n":
            line += 1
        index += 1
    return {k: v for k, v in lines.items() if "[]" not in k}


def read_json(path: Path) -> Document:
    """A JSON object read as catalog/configjson reads a model config (1 MiB, no NaN,
    bounded integers and depth)."""
    try:
        data = load_object(path)
        text = read_bytes(path).decode("utf-8")
    except ConfigJsonError as exc:
        raise SourceError(str(exc)) from None
    return Document(str(path), data, _json_key_lines(text))


def _lines(text: str) -> list[str]:
    """The lines of a TOML file or a shell script, which only a newline ends (str's
    splitlines also breaks at NEL, U+2028, form feeds … that a value may hold)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


_TOML_TABLE = re.compile(r"^\s*\[([A-Za-z0-9_.\-\s\"]+)\]\s*(#.*)?$")
_TOML_KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+)\s*=")


def read_toml(path: Path) -> Document:
    """A TOML file (at most 1 MiB) through tomllib; lines come from its table headers
    and `key =` lines."""
    try:
        raw = read_bytes(path)
    except ConfigJsonError as exc:
        raise SourceError(str(exc).replace("not a model config", "not a TOML config")) from None
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError:
        raise SourceError(f"{path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise SourceError(f"{path}: {exc}") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise SourceError(f"{path}: nested deeper than {CONFIG_LIMITS.max_depth} levels"
                          ) from None
    except ValueError:  # int() of an integer past 4300 digits
        raise SourceError(f"{path}: an integer of more than 4300 digits") from None
    try:
        check_shape(data, str(path), CONFIG_LIMITS)
    except JsonFileError as exc:
        raise SourceError(str(exc)) from None
    lines: dict[str, int] = {}
    table = ""
    for number, text_line in enumerate(_lines(text), 1):
        header = _TOML_TABLE.match(text_line)
        if header:
            table = ""
            for part in header.group(1).split("."):
                table = join(table, part.strip().strip('"'))
            lines.setdefault(table, number)
            continue
        key = _TOML_KEY.match(text_line)
        if key:
            lines.setdefault(join(table, key.group(1)), number)
    return Document(str(path), data, lines)


# ---- shell scripts ---------------------------------------------------------------------

LAUNCHERS = ("torchrun", "accelerate", "python", "python3", "deepspeed", "trl")
# Control operators that end one command of a line (`cd dir; torchrun …`, `export X=1 &&
# torchrun …`); a redirection ends the command's words.
_SEPARATORS = {";", ";;", "&", "&&", "|", "||", "|&"}
_STOP = {">", ">>", "<", "2>&1"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# A here-document (not a here-string, `<<<`): its word, and whether tabs are stripped.
_HEREDOC = re.compile(r"(?<!<)<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
# Programs that run a here-document's lines as commands; any other (cat, tee) reads them
# as text, which may name a launcher without being this script's command.
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "srun", "ssh"})


@dataclass(frozen=True)
class Token:
    text: str
    line: int


@dataclass
class Command:
    """One launch command of a script: the launcher's tokens, the program (a script or a
    module), and the program's own arguments."""

    file: str
    launcher: str
    launcher_args: list[Token]
    program: Token | None
    args: list[Token]
    env: dict[str, Token]


def _logical_lines(text: str) -> list[list[tuple[str, int]]]:
    """Physical lines joined at trailing backslashes, each part with its line number;
    the body of a here-document that no shell runs is left out."""
    lines, commands, current = _lines(text), [], []
    index = 0
    while index < len(lines):
        stripped = lines[index].rstrip()
        index += 1
        continued = stripped.endswith("\\")
        current.append((stripped[:-1] if continued else stripped, index))
        if continued:
            continue
        commands.append(current)
        index = _after_text_heredoc(current, lines, index)
        current = []
    if current:
        commands.append(current)
    return commands


def _after_text_heredoc(parts: list[tuple[str, int]], lines: list[str], index: int) -> int:
    """The index past a here-document that ``parts`` opens and that its command reads as
    text; ``index`` (its body read as commands) otherwise."""
    joined = " ".join(text for text, _ in parts)
    heredoc = _HEREDOC.search(joined)
    if heredoc is None:
        return index
    words = joined.split()
    first = next((w for w in words if not _ASSIGNMENT.match(w)), "")
    if Path(first).name in _SHELLS:
        return index
    strip, word = heredoc.group(1), heredoc.group(3)
    for end in range(index, len(lines)):
        if (lines[end].lstrip("\t") if strip else lines[end]) == word:
            return end + 1
    return len(lines)


def _words(text: str, number: int, file: str) -> list[str]:
    """A line's words as the shell splits them, control operators their own words."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError as exc:
        raise SourceError(f"{file}:{number}: cannot read the shell line ({exc})") from None


def _commands(parts: list[tuple[str, int]], file: str) -> list[list[Token]]:
    """The simple commands of a logical line, each cut at its first redirection."""
    commands: list[list[Token]] = [[]]
    for text, number in parts:
        for word in _words(text, number, file):
            if word in _SEPARATORS:
                commands.append([])
            else:
                commands[-1].append(Token(word, number))
    return [_before_redirection(tokens) for tokens in commands if tokens]


def _before_redirection(tokens: list[Token]) -> list[Token]:
    for index, token in enumerate(tokens):
        if token.text in _STOP or token.text.startswith((">", "2>", "1>")):
            return tokens[:index]
    return tokens


def _is_launch(tokens: list[Token]) -> bool:
    words = [t.text for t in tokens if not _ASSIGNMENT.match(t.text)]
    if not words:
        return False
    program = Path(words[0]).name
    if program == "accelerate":
        return len(words) > 1 and words[1] == "launch"
    return program in LAUNCHERS


def _split(tokens: list[Token], file: str, value_options: set[str]) -> Command:
    env = {}
    while tokens and _ASSIGNMENT.match(tokens[0].text):
        name, _, _ = tokens[0].text.partition("=")
        env[name] = tokens.pop(0)
    launcher = Path(tokens[0].text).name
    rest = tokens[2:] if launcher == "accelerate" else tokens[1:]
    launcher_args: list[Token] = []
    index = 0
    while index < len(rest):
        token = rest[index]
        if token.text in ("-m", "--module"):
            launcher_args.append(token)
            index += 1
            break
        if not token.text.startswith("-"):
            break
        launcher_args.append(token)
        if "=" not in token.text and token.text in value_options and index + 1 < len(rest):
            launcher_args.append(rest[index + 1])
            index += 1
        index += 1
    program = rest[index] if index < len(rest) else None
    return Command(file, launcher, launcher_args, program, rest[index + 1:], env)


# Launcher options that take a value (the rest are flags), as torchrun, python and
# accelerate launch spell them.
LAUNCHER_VALUE_OPTIONS = {
    "--nproc_per_node", "--nproc-per-node", "--nnodes", "--node_rank", "--node-rank",
    "--master_addr", "--master-addr", "--master_port", "--master-port", "--rdzv_endpoint",
    "--rdzv-endpoint", "--rdzv_backend", "--rdzv-backend", "--rdzv_id", "--rdzv-id",
    "--max_restarts", "--max-restarts", "--local-ranks-filter", "--local_ranks_filter",
    "--log_dir", "--log-dir", "--redirects", "--tee", "--monitor_interval",
    "--config_file", "--num_processes", "--num_machines", "--machine_rank",
    "--main_process_ip", "--main_process_port", "--mixed_precision", "--gpu_ids",
    "--dynamo_backend", "--deepspeed_config_file", "--fsdp_sharding_strategy", "-c",
}


def read_command(path: Path) -> Command:
    """The one launch command (torchrun, accelerate launch, python) of a shell script."""
    try:
        text = read_bytes(path).decode("utf-8")
    except ConfigJsonError as exc:
        raise SourceError(str(exc).replace("not a model config", "not a launch script")) from None
    except UnicodeDecodeError:
        raise SourceError(f"{path} is not UTF-8 text") from None
    launches = [tokens for parts in _logical_lines(text)
                for tokens in _commands(parts, str(path)) if _is_launch(tokens)]
    if not launches:
        raise SourceError(f"{path}: no torchrun, accelerate launch or python command found")
    if len(launches) > 1:
        lines = ", ".join(str(t[0].line) for t in launches)
        raise SourceError(f"{path}: {len(launches)} launch commands (lines {lines}); "
                          "import reads a script with one")
    return _split(launches[0], str(path), LAUNCHER_VALUE_OPTIONS)


def read_inline_json(text: str, where: str) -> Any:
    """JSON written inline (a Trainer's --fsdp_config '{...}'), bounded as a file is."""
    try:
        return parse(text, where, CONFIG_LIMITS)
    except JsonFileError as exc:
        raise SourceError(str(exc)) from None


def read_source(path: Path) -> Document:
    """A YAML, JSON or TOML config by its file name's ending."""
    suffix = path.suffix.lower()
    if suffix == ".json":
        return read_json(path)
    if suffix == ".toml":
        return read_toml(path)
    return read_yaml(path)
