"""The whole analysis of a run: drift, costs, what was not tested, and the verdict.

`summarize` is what `summary.json` holds and what `servediff rederive`
recomputes; it reads parsed evidence only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servediff import probes, room
from servediff.analysis import cost, drift, factors, generation, stats, verdict
from servediff.analysis.findings import ArmConditions, ArmCosts, Summary
from servediff.bundle import Evidence
from servediff.evidence import Cell, Conditions
from servediff.plan import Plan
from servediff.probes.base import Measured, ProbeFinding, Untested


def untested(plan: Plan, found: Measured, costs: Mapping[str, ArmCosts]
             ) -> dict[str, Untested]:
    """Every registered probe the run did not measure, with why, in the order probes run;
    then the engine's capacity when it reported none."""
    out = {probe.section: why for probe in probes.ordered()
           if (why := probe.untested(plan, found)) is not None}
    if not any(c.capacity.reported for c in costs.values()):
        out["capacity"] = Untested(reason="not reported")
    return out


def probe_findings(plan: Plan, cells: Sequence[Cell]) -> dict[str, ProbeFinding]:
    """What each probe with an analysis of its own derives from its cells."""
    out = {}
    for probe in probes.ordered():
        mine = [c for c in cells if c.probe in probe.names]
        if mine and (finding := probe.analyse(plan, mine)) is not None:
            out[probe.section] = finding
    return out


def gpus_used(readings: list[Conditions]) -> list[str]:
    """The GPUs on which NVML listed one of the engine's processes, named with their node."""
    return sorted({f"{f'Ray node {c.node[:8]}: ' if c.node else ''}GPU {g.index} ({g.name})"
                   for c in readings for g in c.gpus
                   if set(g.compute_pids or ()) & set(c.engine_pids)})


def conditions(evidence: Evidence, by_arm: Mapping[str, list[Cell]]
               ) -> dict[str, ArmConditions]:
    """What the box was doing around each arm's cells, read before and after each."""
    launches = cost.launches_by_cell(evidence)
    out = {}
    for arm in evidence.arms:
        cells = by_arm[arm]
        readings = [c for cell in cells for c in (cell.conditions, cell.conditions_after) if c]
        foreign = [c.foreign_cpu_cores for c in readings if c.foreign_cpu_cores is not None]
        gpus = [g for c in readings for g in c.gpus]
        gates = [g for rec in evidence.loads if rec.arm == arm
                 for g in (rec.refused, *(y for x in rec.launches
                                          for y in (x.gate, x.cost_gate))) if g is not None]
        out[arm] = ArmConditions(
            machines=sorted({room.of(x).label(x.node) for rec in evidence.loads if rec.arm == arm
                             for x in rec.launches if x.machine}),
            foreign_cpu_cores_max=max(foreign) if foreign else None,
            loadavg_max=max((c.loadavg[0] for c in readings), default=None),
            gpu_sm_clock_mhz=sorted({g.sm_clock_mhz for g in gpus if g.sm_clock_mhz}),
            gpu_temperature_c_max=max((g.temperature_c for g in gpus
                                       if g.temperature_c is not None), default=None),
            throttled_cells=sum(any(g.throttle for c in (cell.conditions,
                                                         cell.conditions_after) if c
                                    for g in c.gpus) for cell in cells),
            busy_cells=sum(bool(cost.busy_reasons(
                cell, launches.get((cell.arm, cell.load, cell.phase, cell.launch)),
                evidence.plan.quiet)) for cell in cells),
            gates=len(gates), gates_not_quiet=sum(not g.quiet for g in gates),
            gpus_used=gpus_used(readings))
    return out


def summarize(evidence: Evidence) -> Summary:
    plan = evidence.plan
    by_arm = drift.cells_by_arm(evidence)
    arms = drift.analyse_arms(evidence, by_arm)
    costs = cost.summarize_costs(evidence, by_arm)
    # Arms are compared within their group only (plan.comparisons), each group against its
    # first arm: groups may have been measured in different rooms.
    groups = plan.groups()
    group_of = {arm: i for i, group in enumerate(groups) for arm in group}
    comparisons = [c for group in groups
                   for c in cost.compare_arms({a: costs[a] for a in group}, group[0], by_arm)]
    shifts = drift.arm_shifts(by_arm, plan.thresholds.moved_abs_nll,
                              {arm: d.signature for arm, d in arms.items()},
                              drift.cell_shapes(evidence))
    missing = untested(plan, Measured(evidence.cells, evidence.partial), costs)
    refused = drift.did_not_start(evidence)
    refused_by_arm = {r.arm: r for r in refused}
    found = probe_findings(plan, evidence.cells)
    return Summary(
        plan_sha256=evidence.locked.sha256, engine=plan.engine, model=plan.model,
        threshold_abs_nll=plan.thresholds.moved_abs_nll, arms=arms,
        arm_shifts=[s for s in shifts if group_of[s.arm_a] == group_of[s.arm_b]],
        generation_arm_shifts=[s for s in generation.across_arms(by_arm)
                               if group_of[s.arm_a] == group_of[s.arm_b]],
        failed_launches=drift.failed_launches(evidence), did_not_start=refused,
        cells=len(evidence.cells),
        partial_cells=drift.partial_cells(evidence),
        invalid_rows=sum(a.invalid_rows for a in arms.values()),
        error_rows=sum(a.error_rows for a in arms.values()), setup=drift.setup(evidence),
        detectable_rate=stats.detectable_rate(len(evidence.locked.corpus.texts)),
        gaps=[*drift.drift_gaps(evidence, arms), *cost.cost_gaps(costs, comparisons, evidence)],
        costs=costs, comparisons=comparisons, conditions=conditions(evidence, by_arm),
        untested=missing, probe_findings=found,
        verdict=verdict.verdict(plan, evidence.arms, arms, costs, comparisons, missing,
                                refused_by_arm, found,
                                {arm for arm, cells in by_arm.items() if cells}),
        factors=factors.analyse(plan, arms, costs, by_arm, refused_by_arm, missing, found))
