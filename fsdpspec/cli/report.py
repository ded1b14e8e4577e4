"""`fsdpspec report RUN_DIR` — the run as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpspec.cli.output import force_option, write_output


@click.command("report")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path),
              default=Path("report.html"), show_default=True, help="The HTML file to write.")
@force_option
def command(run_dir: Path, output: Path, force: bool) -> None:
    """Draw a run directory's curves, status and memory as one HTML file.

    Works on a finished, a running (build it again with --force to refresh) or a failed
    run. Reads files only; needs matplotlib (pip install 'fsdpspec[report]').
    """
    from fsdpspec.charts.figures import ChartsUnavailable
    from fsdpspec.charts.rundata import RunDataError, read_run

    try:
        from fsdpspec.charts.run_charts import run_html

        page = run_html(read_run(run_dir)).encode()
    except (RunDataError, ChartsUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    write_output(output, page, replace=force)
