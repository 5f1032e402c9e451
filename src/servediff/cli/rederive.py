"""`servediff rederive RUN`: recompute every headline number from raw files only."""

from __future__ import annotations

import json
from pathlib import Path

import click

from servediff import atomic
from servediff.analysis.numbers import differences
from servediff.analysis.summary import summarize
from servediff.bisect_verdicts import rederived
from servediff.bisection import BISECT_FILE, read_bisection
from servediff.bundle import Layout, read_evidence, verify
from servediff.cli.console import err, out
from servediff.errors import IntegrityError
from servediff.report.table import run_view


@click.command(epilog="Example: servediff rederive runs/demo-20261205-090712")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="print the re-derived summary as JSON")
def rederive(run_dir: Path, as_json: bool) -> int:
    """Recompute the summary from RUN's raw evidence and check it against summary.json.

    A summary.json written by an earlier servediff (an older schema) is checked on the
    numbers it holds; exit 1 names the first values that differ. RUN may be a bisection's
    folder (servediff bisect --out): each step's bundle is re-derived, then each verdict
    and the answer from those bundles."""
    if (run_dir / BISECT_FILE).exists():
        return _bisection(run_dir)
    return _run(run_dir, as_json)


def _bisection(root: Path) -> int:
    found = read_bisection(root)
    worst = 0
    for step in found.steps:
        if step.bundle is not None:
            err.print(f"build {step.build} ({step.bundle}):", markup=False, highlight=False)
            verify(root / step.bundle)
            worst = max(worst, _run(root / step.bundle, as_json=False, view=False))
    diffs = rederived(root)
    for line in diffs:
        err.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    out.print(found.why, markup=False, highlight=False, soft_wrap=True)
    err.print("the bisection's verdicts and answer, judged again from its bundles, "
              + ("differ from bisect.json (above)" if diffs else "equal bisect.json"),
              markup=False, highlight=False, soft_wrap=True)
    return max(worst, 1 if diffs else 0)


def _run(run_dir: Path, as_json: bool, view: bool = True) -> int:
    summary = summarize(read_evidence(run_dir))
    derived = json.loads(atomic.dumps(summary.model_dump(mode="json")))
    if as_json:
        out.print(atomic.dumps(derived), end="", markup=False, highlight=False, soft_wrap=True)
    elif view:
        out.print(run_view(summary))
    stored_path = Layout(run_dir).summary
    if not stored_path.exists():
        err.print("no summary.json in this run yet; nothing to check against")
        return 0
    try:
        stored = json.loads(stored_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise IntegrityError(
            f"{stored_path}: not JSON ({exc}), so it is not the summary servediff wrote; "
            "`servediff report` writes it again from the raw evidence") from None
    compared, diffs = differences(stored, derived)
    version = stored.get("schema_version") if isinstance(stored, dict) else None
    older = version != derived["schema_version"]
    what = (f"the {compared} numbers of summary.json (schema {version}, an earlier servediff)"
            if older else "summary.json")
    if diffs:
        err.print(f"[red]re-derived summary differs from {what}[/red]; first differences "
                  "(path: stored -> re-derived):", markup=True, highlight=False, soft_wrap=True)
        for line in diffs:
            err.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        return 1
    err.print(f"re-derived summary equals {what}", markup=False, highlight=False, soft_wrap=True)
    return 0
