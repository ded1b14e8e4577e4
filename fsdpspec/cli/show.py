"""`fsdpspec show job.yaml` — the resolved spec, each value marked with its origin:
the file and line that wrote it, the --set that overrode it, or the default."""

from __future__ import annotations

from typing import Any

import click
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from fsdpspec.cli.options import exit_on_errors, load_spec, set_option
from fsdpspec.spec.load import SourceMap, join, parent
from fsdpspec.spec.yamltext import add_comment, dump_yaml, set_header
from fsdpspec.validate import FileReport


def origin(source_map: SourceMap, pointer: str) -> str:
    """Where the value at ``pointer`` came from. A value expanded from a written scalar
    (the dtypes of a `bf16` shorthand) names the line of that scalar."""
    probe = pointer
    while probe:
        if probe in source_map.overrides:
            return source_map.overrides[probe][0]
        if probe in source_map.values and (probe == pointer or _is_leaf(source_map, probe)):
            return f"{source_map.file}:{source_map.values[probe].line}"
        probe = parent(probe)
    return "default"


def _is_leaf(source_map: SourceMap, pointer: str) -> bool:
    prefix = pointer + "/"
    return not any(p.startswith(prefix) for p in source_map.values)


def _annotated(value: Any, pointer: str, source_map: SourceMap,
               resolved: dict[str, str]) -> Any:
    """Round-trip data whose every leaf carries its origin as a comment; a leaf in
    ``resolved`` (pointer → value) shows the value it resolves to, and from what."""
    if not isinstance(value, dict) or not value:
        return value
    node = CommentedMap()
    for key, item in value.items():
        child = join(pointer, key)
        node[key] = _annotated(item, child, source_map, resolved)
        if isinstance(item, list):
            node[key] = CommentedSeq(item)
            node[key].fa.set_flow_style()
        comment = origin(source_map, child)
        if child in resolved:
            node[key] = resolved[child]
            comment += f" ({item} → {resolved[child]})"
        if not isinstance(item, dict) or not item:
            add_comment(node, key, comment)
    return node


def _resolved(report: FileReport) -> dict[str, str]:
    """The values the job resolves: `model.attention: auto` to what the model builds
    (left as written where the model could not be read)."""
    job = report.job
    if job is None or job.spec.model.attention != "auto" or job.geometry is None:
        return {}
    return {"/model/attention": job.attention}


@click.command("show")
@click.argument("file", metavar="FILE")
@set_option
def command(file, overrides) -> None:
    """Print FILE's resolved spec (every default filled in), each value with where it
    came from: FILE:LINE, --set KEY=VALUE, or default."""
    report = load_spec(file, overrides)
    exit_on_errors(report)
    assert report.spec is not None
    document = _annotated(report.spec.as_json_data(), "", report.source_map,
                          _resolved(report))
    set_header(document, f"{file} resolved by fsdpspec; each value's origin is on its right")
    click.echo(dump_yaml(document), nl=False)
