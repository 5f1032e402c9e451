"""The rules between loads, the same for a local run and a Ray run.

Which cells a load still has to measure, when a load is started again, when
an arm is given up (its engine refused every launch), and when the drift
answer is announced: each time an arm's drift loads are all done, and once
before the first cost load when some arm's drift loads are not (the
`Observer` contract). The runner's one load loop asks a `LoadPolicy`, whichever
placement (this machine or a Ray cluster) runs its launches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servediff.bundle import Layout, read_record
from servediff.context import Observer
from servediff.evidence import Cell, LoadRecord, Phase, load_name
from servediff.plan import Plan
from servediff.probes import cells_of_load
from servediff.schedule import CellSpec, schedule


def missing(layout: Layout, cells: list[CellSpec]) -> list[CellSpec]:
    """The cells among `cells` that are not on disk."""
    return [c for c in cells if not layout.cell(c.name).exists()]


def unmeasured(plan: Plan, layout: Layout, refused: set[str]) -> list[str]:
    """The planned cells that are not on disk, but for arms whose engine refused to start
    (a finding of its own, which running again would not change)."""
    return [c.name for arm, load, phase in schedule(plan) if arm not in refused
            for c in missing(layout, cells_of_load(plan, arm, load, phase))]


@dataclass
class LoadPolicy:
    """The run's state between loads: what was announced, which arms did not start."""

    plan: Plan
    layout: Layout
    observer: Observer
    # the arms whose drift answer was shown, and whether the first cost load is still ahead
    announced: set[str] = field(default_factory=set)
    drift_open: bool = True
    # arm -> the engine's message, for arms whose engine refused every launch of a load
    refused: dict[str, str] = field(default_factory=dict)

    def begin(self, first_phase: Phase) -> None:
        """Read what earlier runs of this directory left: announced arms, refused arms."""
        self.announced = self.drift_done()
        self.drift_open = first_phase == "drift"
        self.refused = self.refused_arms()

    def todo(self, arm: str, load: int, phase: Phase) -> list[CellSpec]:
        return self.missing(cells_of_load(self.plan, arm, load, phase))

    def missing(self, cells: list[CellSpec]) -> list[CellSpec]:
        return missing(self.layout, cells)

    def progress(self, cells: list[CellSpec]) -> int:
        """Finished cells and recorded sweep points among `cells`."""
        done = sum(self.layout.cell(c.name).exists() for c in cells)
        kept = [read_record(path, Cell) for c in cells
                if (path := self.layout.progress(c.name)).exists()]
        return done + sum(len(k.sweep) for k in kept)

    def turns(self, arm: str, load: int, phase: Phase) -> LoadTurns:
        """The launches of one load, as the load loop takes them."""
        return LoadTurns(self, arm, load, phase)

    # --- around one load ------------------------------------------------------------

    def may_start(self, arm: str, load: int, phase: Phase) -> bool:
        """Whether this load starts now. An arm whose engine refused it does not start
        again; before the first cost load, the drift answer is shown if some arm's drift
        loads failed (else it was shown as each arm's drift loads finished)."""
        if arm in self.refused:
            self.observer.note(f"{load_name(arm, load, phase)} not started: `{arm}` did not "
                               f"start ({self.refused[arm]})")
            return False
        if self.drift_open and phase == "cost":
            if self.announced != set(self.plan.arms):
                self.announce(self.drift_done())
            self.drift_open = False
        return True

    def after_launch(self, before: int, todo: list[CellSpec], unproductive: int) -> int:
        """Launches in a row that measured nothing, after one that began at `before`. A
        launch that measured something (a sweep point that killed the engine is a
        measurement) does not count against max_attempts."""
        return 0 if self.progress(todo) > before else unproductive + 1

    def again(self, todo: list[CellSpec], unproductive: int) -> bool:
        """Whether the load is started again for the cells it left."""
        return bool(self.missing(todo)) and unproductive < self.plan.launch.max_attempts

    def finished(self, arm: str, load: int, phase: Phase) -> None:
        """After the last launch of a load: a refusal is remembered, a drift answer shown."""
        if self.todo(arm, load, phase) and (message := self.refusal(arm, load, phase)):
            self.refused[arm] = message
        if phase == "drift" and (done := self.drift_done()) - self.announced:
            self.announce(done)
            self.announced = done

    # --- what the directory says ------------------------------------------------------

    def refusal(self, arm: str, load: int, phase: Phase) -> str | None:
        """The engine's message when it refused every launch of this load."""
        path = self.layout.load(load_name(arm, load, phase))
        if not path.exists():
            return None
        return read_record(path, LoadRecord).did_not_start(self.plan.launch.max_attempts)

    def refused_arms(self) -> dict[str, str]:
        """The arms that did not start (refusal above), with the engine's message."""
        out: dict[str, str] = {}
        for path in self.layout.loads():
            record = read_record(path, LoadRecord)
            message = record.did_not_start(self.plan.launch.max_attempts)
            if record.arm not in out and message:
                out[record.arm] = message
        return out

    def drift_done(self) -> set[str]:
        """The arms whose drift cells are all measured."""
        return {arm for arm in self.plan.arms
                if not any(self.todo(arm, load, "drift")
                           for load in range(1, self.plan.loads_per_arm + 1))}

    def announce(self, done: set[str]) -> None:
        arms = list(self.plan.arms)
        self.observer.drift_finished([a for a in arms if a in done],
                                     [a for a in arms if a not in done])


class LoadTurns:
    """The launches of one load, one after another: whether another starts and what it
    measures (`next`), and what the one that ended changed (`ended`). The retry rule lives
    here and in the policy alone; the runner's load loop calls these for each lane, as
    its placement's launches end."""

    def __init__(self, policy: LoadPolicy, arm: str, load: int, phase: Phase) -> None:
        self.policy, self.arm, self.load, self.phase = policy, arm, load, phase
        self.cells = policy.todo(arm, load, phase)
        self.started = policy.may_start(arm, load, phase)
        self.unproductive = 0
        self.before = 0
        self.done = False

    def next(self) -> list[CellSpec] | None:
        """The cells the next launch measures, or None once the load is over (all measured,
        given up, or not started at all); the policy hears of its end once."""
        if self.done:
            return None
        if not self.started or not self.policy.again(self.cells, self.unproductive):
            self.done = True
            if self.started:
                self.policy.finished(self.arm, self.load, self.phase)
            return None
        self.before = self.policy.progress(self.cells)
        return self.policy.missing(self.cells)

    def ended(self) -> None:
        """After a launch of this load, however it ended."""
        self.unproductive = self.policy.after_launch(self.before, self.cells, self.unproductive)
