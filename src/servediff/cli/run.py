"""`servediff run PLAN` and `servediff demo`: measure, then analyse and report."""

from __future__ import annotations

import signal
import time
from importlib import resources
from pathlib import Path

import click
from rich.console import RenderableType

from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence
from servediff.cli.console import err, out
from servediff.cli.progress import RichObserver
from servediff.derived import write_derived
from servediff.plan import load_plan_file, resolve_plan
from servediff.report.table import drift_table, run_view
from servediff.runner import Runner


def _default_out(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _interrupt(signum: int, frame: object) -> None:
    # `kill` is handled like Ctrl-C: the engine is stopped and recorded first.
    raise KeyboardInterrupt


def execute(plan_source: Path | None, out_dir: Path | None) -> None:
    if plan_source is None:
        import tomllib

        text = resources.files("servediff.plans").joinpath("demo.toml").read_text()
        plan, corpus = resolve_plan(tomllib.loads(text), "demo.toml", Path.cwd())
        base = Path.cwd()
    else:
        plan, corpus = load_plan_file(plan_source)
        base = plan_source.parent
    root = out_dir or _default_out(plan.name)
    err.print(f"run directory: {root}  (run the same command with --out {root} to resume)")
    t0 = time.monotonic()
    signal.signal(signal.SIGTERM, _interrupt)
    # Explicitly, too: a shell that starts a command in the background hands it SIGINT
    # ignored, and Python then leaves it ignored; an interrupt must still stop and record.
    signal.signal(signal.SIGINT, _interrupt)
    try:
        def drift_so_far() -> RenderableType:
            return drift_table(summarize(read_evidence(root)))

        with RichObserver(on_drift=drift_so_far) as observer:
            Runner(plan, corpus, root, base, observer).run()
    except KeyboardInterrupt:
        err.print(f"interrupted: finished cells are kept in {root}; "
                  f"run the same command with --out {root} to resume")
        raise SystemExit(130) from None
    summary = write_derived(root)
    out.print(run_view(summary))
    out.print(f"wall time {time.monotonic() - t0:.1f}s; report: {root / 'report.md'}")
    out.print(f"re-derive every number with: servediff rederive {root}")


@click.command()
@click.argument("plan", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="run directory (default runs/<plan name>-<time>); an existing one resumes")
def run(plan: Path, out_dir: Path | None) -> None:
    """Run PLAN (TOML): cold loads per arm, raw evidence, summary and report."""
    execute(plan, out_dir)


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="run directory (default runs/demo-<time>); an existing one resumes")
def demo(out_dir: Path | None) -> None:
    """Drift and flag-cost audit of SmolLM2-135M on this machine (embedded engine)."""
    execute(None, out_dir)
