"""The probes, in the order their cells run within a load, and the registry by cell name.

Adding a probe is one module with a `Probe` subclass plus its entry in `ORDER`.
Drift probes, then cost probes; within the cost phase speed runs first, before
anything long can hurt the engine, and the sweep, which may kill it, last.
"""

from __future__ import annotations

from servediff.evidence import Phase
from servediff.plan import Plan
from servediff.probes.base import Probe
from servediff.probes.concurrency import Concurrency
from servediff.probes.generate import Generate
from servediff.probes.prefix import Prefix
from servediff.probes.score import Score
from servediff.probes.speed import Speed
from servediff.probes.sweep import Sweep
from servediff.schedule import CellSpec

ORDER: tuple[Probe, ...] = (Score(), Concurrency(), Generate(), Speed(), Prefix(), Sweep())
BY_NAME: dict[str, Probe] = {name: probe for probe in ORDER for name in probe.names}


def cells_of_load(plan: Plan, arm: str, load: int, phase: Phase = "drift") -> list[CellSpec]:
    return [cell for probe in ORDER if probe.phase == phase
            for cell in probe.cells(plan, arm, load)]
