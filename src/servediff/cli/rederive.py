"""`servediff rederive RUN`: recompute every headline number from raw files only."""

from __future__ import annotations

import json
from pathlib import Path

import click

from servediff import atomic
from servediff.analysis.summary import summarize
from servediff.bundle import Layout, read_evidence
from servediff.cli.console import err, out
from servediff.report.table import run_view


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="print the re-derived summary as JSON")
def rederive(run_dir: Path, as_json: bool) -> int:
    """Recompute the summary from RUN's raw evidence and check it against summary.json."""
    summary = summarize(read_evidence(run_dir))
    if as_json:
        out.print(atomic.dumps(summary), end="", markup=False, highlight=False, soft_wrap=True)
    else:
        out.print(run_view(summary))
    stored = Layout(run_dir).summary
    if not stored.exists():
        err.print("no summary.json in this run yet; nothing to check against")
        return 0
    if json.loads(stored.read_text(encoding="utf-8")) != json.loads(atomic.dumps(summary)):
        err.print("[red]re-derived summary differs from summary.json[/red]")
        return 1
    err.print("re-derived summary equals summary.json")
    return 0
