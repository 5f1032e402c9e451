"""`servediff run PLAN` and `servediff demo`: measure, then analyse and report."""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import RenderableType

from servediff import sequential
from servediff.bundle import Layout, as_run, read_evidence, read_lock
from servediff.cli.console import err, out
from servediff.cli.progress import RichObserver
from servediff.cli.signals import interruptible
from servediff.corpus import Corpus
from servediff.errors import InputError
from servediff.estimate import Rates, describe, duration, estimate, shape_lines
from servediff.plan import (
    Plan,
    SizedSpec,
    lock,
    read_plan_file,
    resolve_plan,
)
from servediff.policy import unmeasured
from servediff.probes import protocol_size
from servediff.report.table import drift_table, run_view
from servediff.runner import Runner

if TYPE_CHECKING:
    from servediff.analysis.findings import Summary
    from servediff.budget import Sized


def _default_out(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


# The exit status of a run that ended with planned cells unmeasured (a load given up).
INCOMPLETE = 5

# A new run that sends more requests than this is started from a script (standard input
# not a terminal) only with --yes: the default protocol on a CPU is a job of hours.
ASK_ABOVE_REQUESTS = 1000


def announce(plan: Plan, corpus: Corpus, root: Path, base: Path, yes: bool,
             source: str, measured: tuple[Rates, float] | None = None) -> None:
    """Say the protocol's size and a rough duration before anything starts; refuse a big
    new run from a script unless --yes says it is meant."""
    size = protocol_size(plan, corpus)
    notes = f" ({'; '.join(size.notes)})" if size.notes else ""
    err.print(f"protocol: {size.loads} loads, {size.cells} cells, about {size.requests:,} "
              f"requests{notes}", highlight=False)
    for line in shape_lines(plan, size):
        err.print(line, highlight=False)
    err.print(describe(estimate(plan, size, base, measured)), highlight=False)
    if (size.requests > ASK_ABOVE_REQUESTS and not yes and not root.exists()
            and not sys.stdin.isatty()):
        raise InputError(
            f"{source}: about {size.requests:,} requests in {size.cells} cells, more than "
            f"{ASK_ABOVE_REQUESTS:,}: on a CPU that is hours. Set smaller probes in the plan "
            "(docs/costs.md), or pass --yes to start it")


def only_arms(summary: Summary, arms: list[str]) -> Summary:
    """The summary of these arms alone: an arm whose drift loads are not all measured yet
    would show a signature from some of its loads."""
    return summary.model_copy(update={
        "arms": {a: data for a, data in summary.arms.items() if a in arms},
        "arm_shifts": [s for s in summary.arm_shifts if s.arm_a in arms and s.arm_b in arms]})


def sized(raw: dict[str, Any], source: str, budget_s: float, base: Path) -> Sized:
    """The plan `raw`, its grids cut to fit `budget_s`, at the rates this machine measures
    now where it can (servediff.budget); what it did, said as it goes."""
    from servediff.budget import measures_here, size

    plan, _ = resolve_plan(raw, source, base)
    err.print(f"budget {duration(budget_s)}: "
              + ("measuring this machine's rates first" if measures_here(plan) else
                 f"sized at the reference rates ({plan.engine} runs no load before the "
                 "lock: engines differ by several times on one device)"), highlight=False)
    made = size(raw, source, budget_s, base, lambda message: err.print(message))
    if made.measured:
        rates, start = made.measured
        err.print(f"measured: prefill {rates.prefill_tok_s:,.0f} tok/s, decode "
                  f"{rates.decode_tok_s:,.1f} tok/s "
                  f"({rates.source.removeprefix('this machine, ')}), a load's start about "
                  f"{start:.0f} s; the measurement took {made.measuring_s:.0f} s of the "
                  "budget", highlight=False)
    if not made.expected:
        err.print("  nothing cut: without a duration estimate there is nothing to size "
                  "the plan by", highlight=False)
    for cut in made.cuts:
        err.print(f"  cut to fit the budget: {cut}", highlight=False)
    if made.expected > budget_s - made.measuring_s:
        err.print(f"  still about {duration(made.expected)}: every cut is made, and more "
                  "would leave a probe without an answer", highlight=False)
    return made


def sized_demo(budget_s: float, base: Path
               ) -> tuple[Plan, Corpus, tuple[Rates, float] | None]:
    """The demo plan, its grids cut to fit `budget_s` at the rates this machine measures
    now (0: the whole demo, and the reference rates)."""
    import tomllib

    raw = tomllib.loads(resources.files("servediff.plans").joinpath("demo.toml").read_text())
    if not budget_s:
        plan, corpus = resolve_plan(raw, "demo.toml", base)
        return plan, corpus, None
    made = sized(raw, "demo.toml", budget_s, base)
    return made.plan, made.corpus, made.measured


def sized_plan(path: Path, out_dir: Path | None
               ) -> tuple[Plan, Corpus, tuple[Rates, float] | None, Path]:
    """The plan file at `path` and its run directory; with `budget_s`, the plan cut to fit
    it before a new run, or as it was locked when the directory resumes a run of the same
    plan file."""
    raw = read_plan_file(path)
    plan, corpus = resolve_plan(raw, str(path), path.parent)
    root = out_dir or _default_out(plan.name)
    if plan.budget_s is None:
        return plan, corpus, None, root
    written = lock(plan, corpus).sha256
    if Layout(root).lock.exists():
        locked = read_lock(root)
        if locked.plan.sized is not None and locked.plan.sized.written_sha256 == written:
            return locked.plan, locked.corpus, None, root
        return plan, corpus, None, root  # the lock's check names the difference
    made = sized(raw, str(path), plan.budget_s, path.parent)
    rates = made.measured[0].source if made.measured else "the reference rates"
    record = SizedSpec(written_sha256=written, cuts=made.cuts,
                       estimate_s=round(made.expected, 1), rates=rates)
    return made.plan.model_copy(update={"sized": record}), made.corpus, made.measured, root


def execute(plan_source: Path | None, out_dir: Path | None, yes: bool = False,
            ray: str | None = None, budget_s: float = 0.0) -> None:
    measured = None
    if plan_source is None:
        base = Path.cwd()
        root = out_dir or _default_out("demo")
        if Layout(root).lock.exists():  # a demo resumed: the plan it was locked with
            locked = read_lock(root)
            plan, corpus = locked.plan, locked.corpus
        else:
            plan, corpus, measured = sized_demo(budget_s, base)
    else:
        base = plan_source.parent
        plan, corpus, measured, root = sized_plan(plan_source, out_dir)
    announce(plan, corpus, root, base, yes, plan_source.name if plan_source else "demo",
             measured)
    err.print(f"run directory: {root}  (run the same command with --out {root} to resume)")
    t0 = time.monotonic()
    interruptible()
    # The analysis and the reports (scipy, matplotlib: seconds of imports) are loaded when
    # the first drift table is due, not before the first engine starts.
    try:
        def drift_so_far(done: list[str]) -> RenderableType:
            from servediff.analysis.summary import summarize

            return drift_table(only_arms(summarize(read_evidence(root)), done))

        with RichObserver(on_drift=drift_so_far) as observer:
            address = ray or plan.scale.ray
            if address:
                from servediff.scale.ray_run import OnRay

                runner = Runner(plan, corpus, root, base, observer, placement=OnRay(address))
                err.print(f"loads run on the Ray cluster at {address}, one node per "
                          f"comparison ({len(plan.groups())})", highlight=False)
                sequential.run(runner)
            else:
                sequential.run(Runner(plan, corpus, root, base, observer))
    except KeyboardInterrupt:
        err.print(f"interrupted: finished cells are kept in {root}; "
                  f"run the same command with --out {root} to resume")
        raise SystemExit(130) from None
    from servediff.derived import write_derived

    summary = write_derived(root)
    out.print(run_view(summary))
    out.print(f"wall time {time.monotonic() - t0:.1f}s; report: {root / 'report.md'}")
    out.print(f"re-derive every number with: servediff rederive {root}")
    missing = unmeasured(as_run(root, plan), Layout(root),
                         {d.arm for d in summary.did_not_start})
    if missing:
        # the engine failed every launch of a load: a finding, recorded and reported, but
        # not a complete run; a script must not publish it as one
        err.print(f"incomplete: {len(missing)} planned cell(s) not measured "
                  f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): their "
                  f"engine failed {plan.launch.max_attempts} launches in a row "
                  "(launch.max_attempts); the report lists the gaps; run the same command "
                  f"with --out {root} to measure them", highlight=False, soft_wrap=True)
        raise SystemExit(INCOMPLETE)


@click.command(epilog="Example: servediff run plan.toml --out runs/attention")
@click.argument("plan", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="run directory (default runs/<plan name>-<time>); an existing one resumes")
@click.option("--yes", is_flag=True,
              help=f"start a run of more than {ASK_ABOVE_REQUESTS:,} requests from a script")
@click.option("--ray", "ray", metavar="auto|ADDRESS",
              help="run the loads on a Ray cluster, one node per comparison (overrides "
                   "the plan's scale.ray); needs servediff[ray]")
def run(plan: Path, out_dir: Path | None, yes: bool, ray: str | None) -> None:
    """Run PLAN (TOML): cold loads per arm, raw evidence, summary and report."""
    execute(plan, out_dir, yes, ray)


@click.command(epilog="Example: servediff demo --out runs/demo --budget 600")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="run directory (default runs/demo-<time>); an existing one resumes")
@click.option("--budget", "budget_s", type=click.FloatRange(min=0), default=300.0,
              show_default=True,
              help="seconds the demo should take here: its grids are cut to fit, from "
                   "rates measured on this machine first; 0: the whole demo")
def demo(out_dir: Path | None, budget_s: float) -> None:
    """Drift and flag-cost audit of SmolLM2-135M on this machine (embedded engine)."""
    execute(None, out_dir, budget_s=budget_s)
