"""`servediff report RUN`: re-render report.md from the bundle, no engine needed."""

from __future__ import annotations

from pathlib import Path

import click

from servediff.bundle import Layout
from servediff.cli.console import out
from servediff.derived import write_derived


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--stdout", "to_stdout", is_flag=True, help="also print the report")
def report(run_dir: Path, to_stdout: bool) -> None:
    """Re-derive summary.json and report.md from RUN's raw evidence."""
    write_derived(run_dir)
    path = Layout(run_dir).report
    if to_stdout:
        out.print(path.read_text(encoding="utf-8"), markup=False, highlight=False)
    out.print(f"report: {path}")
