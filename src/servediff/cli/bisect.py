"""`servediff bisect PLAN --good B1 --bad B2`: the first build whose property differs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import get_args

import click

from servediff.analysis.findings import Metric
from servediff.bisect_verdicts import PROPERTIES, Property, Rule
from servediff.bisecting import run_bisection
from servediff.cli.console import err, out
from servediff.cli.progress import RichObserver
from servediff.cli.signals import interruptible
from servediff.sourcediff import changes_text


@click.command(epilog="Example: servediff bisect plan.toml --good 11393 --bad 11434 "
                      "--out runs/bisect")
@click.argument("plan", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--good", required=True, help="a build whose property is as it should be")
@click.option("--bad", required=True, help="a later build where it differs")
@click.option("--property", "prop", type=click.Choice(list(get_args(Property))),
              default="scores", show_default=True,
              help="; ".join(f"{k}: {v}" for k, v in PROPERTIES.items()))
@click.option("--min-change", type=click.FloatRange(0, 10), default=0.1, show_default=True,
              help="speed: the relative change a metric must pass, beyond the noise rule")
@click.option("--metric", type=click.Choice(list(get_args(Metric))),
              help="speed: the one metric to bisect on (default: every one)")
@click.option("--text", "text", metavar="TAG",
              help="scores: the one text to compare (a tag of the plan's corpus)")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="where each step's bundle and bisect.json go (default runs/bisect-<time>); "
                   "an existing one resumes")
def bisect(plan: Path, good: str, bad: str, prop: Property, min_change: float,
           metric: Metric | None, text: str | None, out_dir: Path | None) -> None:
    """Measure builds of PLAN's engine between GOOD and BAD as its first arm, and find the
    first whose property differs from GOOD's. Exit 0: found; 1: the ends do not flip."""
    root = out_dir or Path("runs") / f"bisect-{time.strftime('%Y%m%d-%H%M%S')}"
    interruptible()
    try:
        with RichObserver() as observer:
            found = run_bisection(plan, good, bad, prop, root, observer,
                                  lambda line: err.print(line, markup=False, highlight=False),
                                  Rule(min_change, metric, text))
    except KeyboardInterrupt:
        err.print(f"interrupted: each measured step is kept in {root}; run the same command "
                  "to resume", markup=False, highlight=False)
        raise SystemExit(130) from None
    out.print(found.why, markup=False, highlight=False)
    for step in found.steps:
        out.print(f"- build {step.build}: {step.verdict}: {step.why}"
                  + (f" [{step.bundle}]" if step.bundle else ""), markup=False,
                  highlight=False)
    if found.changes is not None:
        out.print(f"what changed in the source, {changes_text(found.changes)}; the diff: "
                  f"{root / (found.changes.diff or '')}", markup=False, highlight=False)
    elif found.changes_why:
        out.print(found.changes_why, markup=False, highlight=False)
    out.print(f"bisect.json and each step's bundle: {root}", markup=False, highlight=False)
    if found.outcome != "found":
        raise SystemExit(1)
