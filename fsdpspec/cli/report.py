"""`fsdpspec report RUN_DIR` — the run as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpspec.cli.output import check_output, force_option, write_output
from fsdpspec.job.rundir import RunDir


@click.command("report")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", metavar="FILE", default="report.html", show_default=True,
              help="The HTML file to write.")
@force_option
def command(run_dir: Path, output: str, force: bool) -> None:
    """Draw a run directory's curves, status and memory as one HTML file.

    Works on a finished, a running (build it again with --force to refresh) or a failed
    run. Reads files only; needs matplotlib (pip install 'fsdpspec[report]').
    """
    from fsdpspec.charts.figures import ChartsUnavailable
    from fsdpspec.charts.rundata import RunDataError, read_run

    files = RunDir(run_dir)
    inputs = (files.resolved_spec, files.metrics, files.events)
    try:
        from fsdpspec.charts.run_charts import DRAWN_KEYS, run_html

        check_output(output, replace=force, inputs=inputs)
        page = run_html(read_run(run_dir, DRAWN_KEYS)).encode()
    except (RunDataError, ChartsUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    write_output(output, page, replace=force, inputs=inputs)
