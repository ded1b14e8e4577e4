"""The default terminal format: a header line, the source line and a caret under the
offending span, then the hint — as compilers print them."""

from __future__ import annotations

from collections.abc import Sequence

from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.validate import FileReport


def escape(text: str) -> str:
    """Escape rich markup; rich is imported only when this format is used."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}


def _source_line(report: FileReport, d: Diagnostic) -> str | None:
    if d.position is None:
        return None
    if d.file != report.file:  # a --set flag: the flag is the source
        return d.file
    lines = report.text.splitlines()
    index = d.position.line - 1
    return lines[index] if 0 <= index < len(lines) else None


def _frame(report: FileReport, d: Diagnostic) -> list[str]:
    text = _source_line(report, d)
    pos = d.position
    if text is None or pos is None:
        return []
    number = str(pos.line)
    pad = " " * len(number)
    end = pos.end_col if pos.end_line == pos.line else len(text) + 1
    width = max(1, min(end, len(text) + 1) - pos.col)
    caret = " " * (pos.col - 1) + "^" * width
    return [
        f"[blue]{pad} |[/]",
        f"[blue]{number} |[/] {escape(text)}",
        f"[blue]{pad} |[/] [{_STYLE[d.severity]}]{caret}[/]",
    ]


def _diagnostic(report: FileReport, d: Diagnostic) -> list[str]:
    pos = d.position
    head = (f"[bold]{escape(d.location)}[/]: [{_STYLE[d.severity]}]{d.severity.value}"
            f"\\[{d.code}][/]: {escape(d.message)}")
    lines = [head, *_frame(report, d)]
    if d.hint:
        lines.append(f"[blue]{' ' * len(str(pos.line if pos else ''))} =[/] help: "
                     f"{escape(d.hint)}")
    return lines


def summary(reports: Sequence[FileReport]) -> str:
    every = [d for r in reports for d in r.diagnostics]
    counts = {sev: sum(d.severity is sev for d in every) for sev in Severity}
    files = f"{len(reports)} file{'s' * (len(reports) != 1)}"
    if not counts[Severity.ERROR] and not counts[Severity.WARNING]:
        notes = counts[Severity.INFO]
        return f"[green]✓[/] {files} valid" + (f" ({notes} info)" if notes else "")
    return ", ".join(f"{n} {sev.value}{'s' * (n != 1 and sev is not Severity.INFO)}"
                     for sev, n in counts.items() if n or sev is not Severity.INFO) + f" in {files}"


def render(reports: Sequence[FileReport]) -> str:
    """Rich markup; the CLI prints it through a Console (colour only on a terminal)."""
    blocks = ["\n".join(_diagnostic(r, d)) for r in reports for d in r.diagnostics]
    return "\n\n".join([*blocks, summary(reports)]) + "\n"
