"""Analysis of the cost probes: speed with noise bands, survival, capacity, start-up.

Pure functions of cost cells and load records. Noise bands are bootstrap
intervals with a fixed seed, so `servediff rederive` prints the same band the
run printed. A difference between two arms is a cost or a gain only when its
interval excludes zero; otherwise it is "within noise", stated with the band.
The comparisons between arms are made here, once (`compare_arms`); the
verdict reads them and never recomputes a number.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from typing import get_args

import numpy as np
from scipy import stats as sps

from servediff import room
from servediff.analysis.findings import (
    ArmCosts,
    Capacity,
    CapacitySeen,
    CostComparison,
    CostLoadRefused,
    Gap,
    Limit,
    LoadsMissing,
    Metric,
    MetricStats,
    OneCostLoad,
    OneRun,
    Speed,
    SpeedAtLength,
    SpeedComparison,
    SpeedSkipped,
    SpeedVerdict,
    Startup,
    StartupComparison,
    StartupNotCompared,
    Survival,
    SweepPointsMissing,
    SweepPointsShort,
    SweepPointView,
    Trend,
)
from servediff.analysis.stats import stable
from servediff.bundle import Evidence, Layout
from servediff.evidence import Cell, Launch, SweepPoint
from servediff.plan import QuietSpec
from servediff.probes.speed import SpeedProbe
from servediff.probes.sweep import SweepProbe, SweepSettings, bracket, failed
from servediff.schedule import cost_runs

SEED = 20261130
RESAMPLES = 4000
MIN_REPLICATES = 3
METRICS: tuple[Metric, ...] = get_args(Metric)
HIGHER_IS_BETTER: dict[Metric, bool] = {"decode_tok_s": True, "prefill_tok_s": True,
                                        "ttft_s": False}
SLOTS = ("max_concurrency", "total_slots", "max_running_requests", "max_num_seqs")


def band(values: Sequence[float]) -> list[float] | None:
    """95 % bootstrap interval of the mean of `values`."""
    if len(values) < 2 or len(set(values)) == 1:
        return [float(values[0])] * 2 if values else None
    res = sps.bootstrap((np.asarray(values),), np.mean, n_resamples=RESAMPLES,
                        confidence_level=0.95, method="percentile",
                        rng=np.random.default_rng(SEED))
    return [stable(res.confidence_interval.low), stable(res.confidence_interval.high)]


def diff_band(a: Sequence[float], b: Sequence[float]) -> list[float] | None:
    """95 % bootstrap interval of mean(b) - mean(a), resampling each arm on its own.

    None below three replicates per arm: no band is claimed from two numbers."""
    if len(a) < MIN_REPLICATES or len(b) < MIN_REPLICATES:
        return None
    res = sps.bootstrap((np.asarray(a), np.asarray(b)),
                        lambda x, y, axis=-1: np.mean(y, axis=axis) - np.mean(x, axis=axis),
                        n_resamples=RESAMPLES, confidence_level=0.95, method="percentile",
                        paired=False, vectorized=True, rng=np.random.default_rng(SEED))
    return [stable(res.confidence_interval.low), stable(res.confidence_interval.high)]


def monotone(values: Sequence[float]) -> bool:
    """Strictly rising or falling over at least four replicates in time order."""
    if len(values) < 4:
        return False
    steps = [b - a for a, b in itertools.pairwise(values)]
    return all(s > 0 for s in steps) or all(s < 0 for s in steps)


def load_means(stats: MetricStats) -> list[float]:
    """The mean of each load's values, in run order."""
    return [stable(statistics.fmean(v for v, g in zip(stats.values, stats.groups, strict=True)
                                    if g == key)) for key in sorted(set(stats.groups))]


def overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two arms' load means overlap: some load of each lies within the other's."""
    return not (max(a) < min(b) or max(b) < min(a))


def _stats(values: list[float], groups: list[int]) -> MetricStats:
    return MetricStats(values=values, mean=statistics.fmean(values) if values else None,
                       band95=band(values), monotone_drift=monotone(values), groups=groups)


def busy_reasons(cell: Cell, launch: Launch | None, spec: QuietSpec) -> list[str]:
    """Why a cell counts as measured on a busy machine: its launch's gate found the box
    busy and the plan said mark, or around the cell other processes used more CPU than
    the plan allows, a GPU ran someone else's compute, or its clocks were held down."""
    out = []
    # a combined load's cost cells: the gate before its cost part, when there was one
    gate = launch and (launch.cost_gate if cell.phase == "cost" and launch.cost_gate
                       else launch.gate)
    if gate and not gate.quiet:
        out.append(f"the gate before the load found: {gate.reasons[0]}")
    for when, c in (("before", cell.conditions), ("after", cell.conditions_after)):
        if c is None:
            continue
        if c.foreign_cpu_cores is not None and c.foreign_cpu_cores > spec.max_foreign_cpu:
            out.append(f"{when}: other processes used {c.foreign_cpu_cores:.2f} CPU cores")
        for g in c.gpus:
            if g.foreign_pids:
                out.append(f"{when}: GPU {g.index} ran other compute processes")
            if g.throttle:
                out.append(f"{when}: GPU {g.index} clocks held down ({', '.join(g.throttle)})")
    return out


def launches_by_cell(evidence: Evidence) -> dict[tuple[str, int, str, int], Launch]:
    """(arm, load, phase, attempt) -> the launch record (a combined load's launches under
    both phases: its cost cells keep their cost names)."""
    return {(rec.arm, rec.load, phase, x.attempt): x for rec in evidence.loads
            for phase in ((rec.phase, "cost") if rec.combined else (rec.phase,))
            for x in rec.launches}


def _some(values: Sequence[float | None], groups: Sequence[int]) -> MetricStats | None:
    """The stats of a metric that only some samples carry; None where none does."""
    found = [(v, g) for v, g in zip(values, groups, strict=True) if v is not None]
    return _stats([v for v, _ in found], [g for _, g in found]) if found else None


def speed_arm(cells: Sequence[Cell], launches: Mapping[tuple[str, int, str, int], Launch]
              | None = None, spec: QuietSpec | None = None) -> Speed | None:
    mine = sorted((c for c in cells if c.probe in SpeedProbe.names), key=lambda c: c.started_at)
    if not mine:
        return None
    spec = spec or QuietSpec()
    # per cell (one per launch, in run order): its launch, its room and its load number
    launch_of = {id(c): (launches or {}).get((c.arm, c.load, c.phase, c.launch)) for c in mine}
    room_of = {key: room.of(x).label() for key, x in launch_of.items()
               if x is not None and x.machine}
    group = {id(c): n for n, c in enumerate(mine)}
    busy = {Layout.cell_ref(c.name): why for c in mine
            if (why := busy_reasons(c, launch_of[id(c)], spec))}
    per_length = []
    for level, length in sorted({(s.concurrency, s.prompt_tokens) for c in mine
                                 for s in c.speed}):
        rows = [(c, s) for c in mine for s in c.speed
                if (s.concurrency, s.prompt_tokens) == (level, length) and not s.warmup
                and s.status == "ok"]
        refs = sorted({Layout.cell_ref(c.name) for c, _ in rows})
        rooms = sorted({room_of[id(c)] for c, _ in rows if id(c) in room_of})
        groups = [group[id(c)] for c, _ in rows]
        stats = {m: _some([getattr(s, m) for _, s in rows], groups) or _stats([], [])
                 for m in METRICS}
        per_length.append(SpeedAtLength(
            prompt_tokens=length, concurrency=level, replicates=len(rows),
            errors=sum(s.status == "error" for c in mine for s in c.speed
                       if (s.concurrency, s.prompt_tokens) == (level, length)),
            cells=refs, busy={ref: busy[ref] for ref in refs if ref in busy}, rooms=rooms,
            decode_tok_s=stats["decode_tok_s"], prefill_tok_s=stats["prefill_tok_s"],
            ttft_s=stats["ttft_s"],
            mode="steady" if any(s.mode == "steady" for _, s in rows) else "burst",
            itl_s=_some([s.itl_s for _, s in rows], groups),
            throughput_tok_s=_some([s.throughput_tok_s for _, s in rows], groups)))
    skipped = {(x.length, x.reason): x for c in mine for x in c.skipped}
    return Speed(per_length=per_length,
                 monotone_drift=[Trend(prompt_tokens=e.prompt_tokens, metric=m,
                                       concurrency=e.concurrency)
                                 for e in per_length for m in METRICS
                                 if e.metric(m).monotone_drift],
                 skipped=list(skipped.values()))


def speed_compare(a: Speed | None, b: Speed | None) -> list[SpeedComparison]:
    """Arm b against arm a, per prompt length and metric: cost, gain or within noise."""
    if a is None or b is None:
        return []
    out = []
    by_length = {(e.prompt_tokens, e.concurrency): e for e in a.per_length}
    for eb in b.per_length:
        ea = by_length.get((eb.prompt_tokens, eb.concurrency))
        if ea is None:
            continue
        for metric in METRICS:
            ma, mb = ea.metric(metric), eb.metric(metric)
            xa, xb = ma.values, mb.values
            interval = diff_band(xa, xb)
            means = [load_means(ma), load_means(mb)]
            overlaps = all(len(m) >= 2 for m in means) and overlap(*means)
            diff: float | None = None
            verdict: SpeedVerdict = "not enough replicates"
            if interval is not None:
                diff = statistics.fmean(xb) - statistics.fmean(xa)
                if interval[0] <= 0 <= interval[1] or overlaps:
                    verdict = "within noise"
                else:
                    verdict = "gain" if (diff > 0) == HIGHER_IS_BETTER[metric] else "cost"
            mean_a = ea.metric(metric).mean
            out.append(SpeedComparison(
                prompt_tokens=eb.prompt_tokens, concurrency=eb.concurrency, metric=metric,
                verdict=verdict, mean_a=mean_a,
                mean_b=eb.metric(metric).mean, difference=diff, difference_band95=interval,
                relative=diff / mean_a if diff is not None and mean_a else None,
                replicates=[len(xa), len(xb)], cells=[*ea.cells, *eb.cells],
                load_means=means, loads_overlap=overlaps,
                busy=sorted({*ea.busy, *eb.busy}), rooms=sorted({*ea.rooms, *eb.rooms})))
    return out


def order_effect(a: Sequence[Cell], b: Sequence[Cell], length: int, metric: Metric,
                 level: int = 1) -> tuple[float, float] | None:
    """(arm b - arm a, first half - second half of the cost loads in run order) of the
    mean per cost load; None with fewer than two cost loads per arm."""
    loads = []
    for arm, cells in (("a", a), ("b", b)):
        for c in cells:
            values = [v for s in c.speed if (s.prompt_tokens, s.concurrency) == (length, level)
                      and not s.warmup
                      and s.status == "ok" and (v := getattr(s, metric)) is not None]
            if values:
                loads.append((c.started_at, arm, statistics.fmean(values)))
    if sum(x[1] == "a" for x in loads) < 2 or sum(x[1] == "b" for x in loads) < 2:
        return None
    loads.sort()
    half = len(loads) // 2
    arm_diff = (statistics.fmean(v for _, arm, v in loads if arm == "b")
                - statistics.fmean(v for _, arm, v in loads if arm == "a"))
    order_diff = (statistics.fmean(v for *_, v in loads[:half])
                  - statistics.fmean(v for *_, v in loads[len(loads) - half:]))
    return arm_diff, order_diff


def survival_arm(cells: Sequence[Cell], partial: Sequence[Cell],
                 spec: SweepSettings | None = None) -> Survival | None:
    """The survival map of one arm from its sweep cell (or the sweep's progress so far)."""
    sweeps = [c for c in [*cells, *partial] if c.probe in SweepProbe.names]
    if not sweeps:
        return None
    cell = max(sweeps, key=lambda c: len(c.sweep))
    context = cell.context_length
    complete = any(c.probe in SweepProbe.names for c in cells)
    points = [_point(p, context) for p in cell.sweep]
    levels = sorted({p.level for p in points})
    largest: dict[str, int | None] = {}
    first_failure: dict[str, SweepPointView | None] = {}
    for level in levels:
        mine = sorted((p for p in points if p.level == level), key=lambda p: p.length)
        ok = [p.length for p in mine if p.outcome in ("ok", "slow")]
        largest[str(level)] = max(ok) if ok else None
        first_failure[str(level)] = next((p for p in mine if p.failure), None)
    seen = {(p.length, p.level) for p in points}
    return Survival(
        limit=limit(cell, spec or SweepSettings()),
        context_length=context, complete=complete, points=points, levels=levels,
        lengths=sorted({p.length for p in points}), largest_ok_length=largest,
        first_failure=first_failure,
        not_measured=[x for x in cell.sweep_plan if tuple(x) not in seen],
        cell=Layout.cell_ref(cell.name) if complete else Layout.progress_ref(cell.name),
        skipped=cell.skipped)


def limit(cell: Cell, spec: SweepSettings) -> Limit | None:
    """Where single prompts stop surviving: the sweep's bracket and its width."""
    found = bracket(cell.sweep, cell.context_length)
    if found is None:
        return None
    held, top = found
    outcome = next(p.outcome for p in cell.sweep if (p.length, p.level) == (top, 1))
    width = spec.resolution_at(top)
    return Limit(survives=held, fails_from=top, outcome=outcome, resolution=width,
                 resolved=top - held <= max(width, 1))


def _point(p: SweepPoint, context: int | None) -> SweepPointView:
    return SweepPointView(
        length=p.length, level=p.level, outcome=p.outcome,
        beyond_context=context is not None and p.length + 1 > context,
        failure=failed(p, context), achieved_ok=p.achieved_ok,
        achieved_prompt_tokens=p.achieved_prompt_tokens, http_status=p.http_status,
        error=p.error, returncode=p.returncode, signal=p.signal,
        health_answered=p.health_answered, seconds=p.seconds, launch=p.launch)


def capacity_arm(evidence: Evidence, arm: str) -> Capacity:
    """KV pool and concurrency as the engine reported them, per launch that got ready."""
    seen = [CapacitySeen(load=rec.load, phase=rec.phase, attempt=launch.attempt,
                         **launch.capacity)
            for rec in evidence.loads if rec.arm == arm
            for launch in rec.launches if launch.capacity]
    prefer = [c for c in seen if c.phase == "cost"] or seen
    reported = [c.model_dump() for c in prefer]
    kv = sorted({c["kv_tokens"] for c in reported if c.get("kv_tokens") is not None})
    slots = sorted({c[k] for c in reported for k in SLOTS if c.get(k) is not None})
    return Capacity(launches=seen, kv_tokens=kv[0] if kv else None, kv_tokens_varied=len(kv) > 1,
                    max_concurrency=slots[0] if slots else None, reported=bool(seen),
                    evidence=sorted({Layout.load_ref(rec.name) for rec in evidence.loads
                                     if rec.arm == arm and any(x.capacity
                                                               for x in rec.launches)}))


def startup_arm(evidence: Evidence, arm: str) -> Startup:
    timed = [launch for rec in evidence.loads if rec.arm == arm
             for launch in rec.launches if launch.seconds_to_ready is not None]
    seconds = [x.seconds_to_ready for x in timed if x.seconds_to_ready is not None]
    return Startup(seconds_to_ready=seconds,
                   mean=statistics.fmean(seconds) if seconds else None, band95=band(seconds),
                   rooms=sorted({room.of(x).label() for x in timed if x.machine}))


def startup_compare(a: Startup, b: Startup) -> StartupComparison | None:
    xa, xb = a.seconds_to_ready, b.seconds_to_ready
    interval = diff_band(xa, xb)
    if interval is None or a.mean is None or b.mean is None:
        return None
    verdict = ("within noise" if interval[0] <= 0 <= interval[1]
               else "cost" if b.mean > a.mean else "gain")
    return StartupComparison(mean_a=a.mean, mean_b=b.mean, band95=interval,
                             verdict=verdict, starts=[len(xa), len(xb)],  # type: ignore[arg-type]
                             rooms=sorted({*a.rooms, *b.rooms}))


def summarize_costs(evidence: Evidence, by_arm: Mapping[str, list[Cell]]
                    ) -> dict[str, ArmCosts]:
    partial = {arm: [c for c in evidence.partial if c.arm == arm] for arm in evidence.arms}
    launches = launches_by_cell(evidence)
    return {arm: ArmCosts(speed=speed_arm(by_arm[arm], launches, evidence.plan.quiet),
                          survival=survival_arm(by_arm[arm], partial[arm],
                                                evidence.plan.probes.get(SweepSettings)),
                          capacity=capacity_arm(evidence, arm),
                          startup=startup_arm(evidence, arm)) for arm in evidence.arms}


def compare_arms(costs: Mapping[str, ArmCosts], baseline: str,
                 by_arm: Mapping[str, list[Cell]] | None = None) -> list[CostComparison]:
    """Every other arm against the baseline: speed per length and metric (with whether the
    difference follows run order rather than arm), start-up."""
    base = costs[baseline]
    out = []
    for arm, c in costs.items():
        if arm == baseline:
            continue
        speed = speed_compare(base.speed, c.speed)
        if by_arm is not None:
            a = [x for x in by_arm[baseline] if x.probe in SpeedProbe.names]
            b = [x for x in by_arm[arm] if x.probe in SpeedProbe.names]
            speed = [_with_order(row, order_effect(a, b, row.prompt_tokens, row.metric,
                                                   row.concurrency))
                     for row in speed]
        out.append(CostComparison(baseline=baseline, arm=arm, speed=speed,
                                  startup=startup_compare(base.startup, c.startup),
                                  starts=[len(base.startup.seconds_to_ready),
                                          len(c.startup.seconds_to_ready)]))
    return out


def _with_order(row: SpeedComparison, effect: tuple[float, float] | None) -> SpeedComparison:
    if effect is None:
        return row
    arm_diff, order_diff = effect
    return row.model_copy(update={"order_difference": stable(order_diff),
                                  "follows_order": abs(order_diff) > abs(arm_diff)})


def cost_gaps(costs: Mapping[str, ArmCosts], comparisons: list[CostComparison],
              evidence: Evidence) -> list[Gap]:
    """Parts of the cost regime that were planned and not reached."""
    plan = evidence.plan
    out: list[Gap] = []
    for arm, c in costs.items():
        s = c.survival
        if s is not None and s.not_measured:
            length, level = s.not_measured[0]
            out.append(SweepPointsMissing(arm=arm, count=len(s.not_measured),
                           length=length, level=level))
        if s is not None:
            short = [p for p in s.points if p.achieved_ok is False]
            if short:
                out.append(SweepPointsShort(arm=arm, count=len(short),
                               tolerance=plan.probes.get(SweepSettings).tolerance))
        for skip in c.speed.skipped if c.speed else []:
            out.append(SpeedSkipped(arm=arm, length=skip.length,
                           reason=skip.reason))
    for comp in comparisons:
        if comp.startup is None and min(comp.starts, default=0) > 0:
            out.append(StartupNotCompared(arm=comp.arm,
                           count=min(comp.starts)))
    measured = {(c.arm, c.load) for c in evidence.cells if c.phase == "cost"}
    for rec in evidence.loads:
        if rec.phase == "cost" and rec.refused and (rec.arm, rec.load) not in measured:
            out.append(CostLoadRefused(arm=rec.arm, load=rec.load, phase="cost",
                           reason="; ".join(rec.refused.reasons)))
    if cost_runs(plan):
        for arm in plan.arms:
            done = len({load for a, load in measured if a == arm})
            if done < plan.cost_loads_of(arm):
                out.append(LoadsMissing(kind="cost loads missing", arm=arm, count=done,
                               of=plan.cost_loads_of(arm)))
    if any(c.speed for c in costs.values()) and plan.cost_loads_per_arm < 2:
        out.append(OneCostLoad(count=plan.cost_loads_per_arm))
    compared = {a for comp in comparisons if comp.speed for a in (comp.arm, comp.baseline)}
    if compared:
        out.append(OneRun(count=min(len({load for a, load in measured if a == arm})
                                    for arm in compared)))
    return out
