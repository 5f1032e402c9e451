"""`servediff report RUN`: re-render the derived files from the bundle, no engine needed."""

from __future__ import annotations

from pathlib import Path

import click

from servediff.bisection import BISECT_FILE
from servediff.bundle import Layout
from servediff.cli.console import out
from servediff.derived import BISECT_HTML, write_bisection_report, write_derived


@click.command(epilog="Example: servediff report runs/demo-20261205-090712 --format html"
                        " --stdout > report.html")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--format", "fmt", type=click.Choice(["md", "html", "json"]), default="md",
              show_default=True, help="which file to name (and print with --stdout)")
@click.option("--stdout", "to_stdout", is_flag=True, help="also print that file")
def report(run_dir: Path, fmt: str, to_stdout: bool) -> None:
    """Re-derive summary.json, report.md and report.html from RUN's raw evidence. RUN may
    be a bisection's folder (servediff bisect --out): its bisect.md and bisect.html are
    written again from bisect.json."""
    if (run_dir / BISECT_FILE).exists():
        md = write_bisection_report(run_dir)
        path = {"md": md, "html": run_dir / BISECT_HTML, "json": run_dir / BISECT_FILE}[fmt]
    else:
        write_derived(run_dir)
        layout = Layout(run_dir)
        path = {"md": layout.report, "html": layout.html, "json": layout.summary}[fmt]
    if to_stdout:
        out.print(path.read_text(encoding="utf-8"), markup=False, highlight=False,
                  soft_wrap=True)
    out.print(f"report: {path}")
