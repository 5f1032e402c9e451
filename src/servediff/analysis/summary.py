"""The whole analysis of a run: drift, costs, what was not tested, and the verdict.

`summarize` is what `summary.json` holds and what `servediff rederive`
recomputes; it reads parsed evidence only.
"""

from __future__ import annotations

from collections.abc import Mapping

from servediff.analysis import cost, drift, generation, stats, verdict
from servediff.analysis.findings import ArmCosts, ArmDrift, Summary, Untested
from servediff.bundle import Evidence
from servediff.plan import Plan

# Probes servediff defines; the ones a run did not measure are listed as not tested.
PROBES = ("concurrency", "generate", "speed", "sweep", "prefix", "capacity")


def untested(plan: Plan, arms: Mapping[str, ArmDrift], costs: Mapping[str, ArmCosts]
             ) -> dict[str, Untested]:
    """Every probe the run did not measure, with why."""
    out: dict[str, Untested] = {}
    probes = plan.probes
    measured = {
        "concurrency": any(a.concurrency for a in arms.values()),
        "generate": any(a.generation for a in arms.values()),
        "speed": any(c.speed for c in costs.values()),
        "sweep": any(c.survival for c in costs.values()),
        "prefix": any(c.prefix for c in costs.values()),
    }
    enabled = {"concurrency": probes.concurrency.enabled, "generate": probes.generate.enabled,
               "speed": probes.speed.enabled, "sweep": probes.sweep.enabled,
               "prefix": probes.prefix.enabled}
    for name, on in enabled.items():
        if not on:
            out[name] = Untested(reason="disabled")
        elif name in ("speed", "sweep", "prefix") and plan.base_url:
            out[name] = Untested(reason="external endpoint")
        elif not measured[name]:
            out[name] = Untested(reason="no measurement")
    if not any(c.capacity.reported for c in costs.values()):
        out["capacity"] = Untested(reason="not reported")
    return out


def summarize(evidence: Evidence) -> Summary:
    plan = evidence.plan
    by_arm = drift.cells_by_arm(evidence)
    arms = drift.analyse_arms(evidence, by_arm)
    costs = cost.summarize_costs(evidence, by_arm)
    comparisons = cost.compare_arms(costs, evidence.arms[0])
    missing = untested(plan, arms, costs)
    return Summary(
        plan_sha256=evidence.locked.sha256, engine=plan.engine, model=plan.model,
        threshold_abs_nll=plan.thresholds.moved_abs_nll, arms=arms,
        arm_shifts=drift.arm_shifts(by_arm, plan.thresholds.moved_abs_nll,
                                    {arm: d.signature for arm, d in arms.items()}),
        generation_arm_shifts=generation.across_arms(by_arm),
        failed_launches=drift.failed_launches(evidence), cells=len(evidence.cells),
        partial_cells=drift.partial_cells(evidence),
        invalid_rows=sum(a.invalid_rows for a in arms.values()),
        error_rows=sum(a.error_rows for a in arms.values()), setup=drift.setup(evidence),
        detectable_rate=stats.detectable_rate(len(evidence.locked.corpus.texts)),
        gaps=[*drift.drift_gaps(evidence, arms), *cost.cost_gaps(costs, comparisons, evidence)],
        costs=costs, comparisons=comparisons, untested=missing,
        verdict=verdict.verdict(plan, evidence.arms, arms, costs, comparisons, missing))
