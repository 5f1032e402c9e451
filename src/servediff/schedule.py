"""What a run measures and in what order: cells, loads, counterbalanced arms.

A cell is one (arm, load, probe, repeat) unit, the smallest thing that is
written, skipped on resume, or measured again. Loads run drift first, then
cost; within a phase the arms alternate A B for load 1, B A for load 2, ...
(A B B A with two cost loads per arm), so a slow drift of the machine does
not fall on one arm.
"""

from __future__ import annotations

from dataclasses import dataclass

from servediff.evidence import Phase, ProbeName, cell_name
from servediff.plan import Plan


@dataclass(frozen=True)
class CellSpec:
    """One (arm, load, probe, repeat) unit: what the runner schedules and a cell file holds."""

    arm: str
    load: int
    probe: ProbeName
    repeat: int
    phase: Phase = "drift"
    # the batch probe's batch size (None: any other probe)
    batch_size: int | None = None

    @property
    def name(self) -> str:
        return cell_name(self.arm, self.load, self.probe, self.repeat, self.phase,
                         self.batch_size)


def cost_runs(plan: Plan) -> bool:
    """Cost loads need servediff to start the engine (restarts after a death included)."""
    return plan.base_url is None and bool(plan.probes.cost_probes())


def schedule(plan: Plan) -> list[tuple[str, int, Phase]]:
    """(arm, load, phase) of every load, in the order they run; cost loads added to some
    arms (adaptive) run after the others, still alternating among those arms. A cost load
    that a drift load runs too (`Plan.combined`) is not a load of its own."""
    arms = list(plan.arms)
    counts: list[tuple[Phase, dict[str, int]]] = [
        ("drift", dict.fromkeys(arms, plan.loads_per_arm))]
    if cost_runs(plan):
        counts.append(("cost", {arm: plan.cost_loads_of(arm) for arm in arms}))
    order: list[tuple[str, int, Phase]] = []
    for phase, loads in counts:
        for load in range(1, max(loads.values()) + 1):
            these = [arm for arm in arms if loads[arm] >= load]
            for arm in these if load % 2 else reversed(these):
                if phase == "drift" or not plan.combined(arm, load):
                    order.append((arm, load, phase))
    return order
