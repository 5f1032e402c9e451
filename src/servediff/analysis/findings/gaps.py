"""What was not measured: gaps, failed launches and partial cells."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from servediff.analysis.findings.base import Finding
from servediff.evidence import Phase


class PlanGap(Finding):
    """A regime the plan itself left out: an external endpoint (no reloads), one load per
    arm, no repeat probe."""

    kind: Literal["external endpoint", "one load", "no repeat"]


class OneCostLoad(Finding):
    """One cost load per arm (`count`): load-to-load speed noise not estimated."""

    kind: Literal["one cost load"] = "one cost load"
    count: int


class OneRun(Finding):
    """Speed compared within one run (`count`: cost loads per arm): the noise between runs
    of the plan is not in its bands (schema 21)."""

    kind: Literal["one run"] = "one run"
    count: int


class ProbeOnSomeLoads(Finding):
    """Probe `reason` ran in `count` of the `of` drift loads per arm (the plan's `loads`)."""

    kind: Literal["probe on some loads"] = "probe on some loads"
    reason: str
    count: int
    of: int


class ArmGap(Finding):
    """A gap of one arm."""

    arm: str


class LoadsMissing(ArmGap):
    """The arm has `count` of `of` planned loads (drift: with a score cell; cost: with a
    cell)."""

    kind: Literal["loads missing", "cost loads missing"]
    count: int
    of: int


class FirstRequestCached(ArmGap):
    """`count` cached tokens on the first request after a start: the load was not cold."""

    kind: Literal["first request cached"] = "first request cached"
    load: int
    phase: Phase
    count: int


class CostLoadRefused(ArmGap):
    """The quiet-box gate refused cost load `load` (`reason`)."""

    kind: Literal["cost load refused"] = "cost load refused"
    load: int
    phase: Phase
    reason: str


class SweepPointsMissing(ArmGap):
    """`count` planned sweep points not measured (the first: `length` x `level`)."""

    kind: Literal["sweep points missing"] = "sweep points missing"
    count: int
    length: int
    level: int


class SweepPointsShort(ArmGap):
    """`count` sweep points off their nominal length by more than `tolerance` (a fraction;
    schema 5 and before: `of`)."""

    kind: Literal["sweep points short"] = "sweep points short"
    count: int
    tolerance: float


class SpeedSkipped(ArmGap):
    """A speed length left out (`reason`)."""

    kind: Literal["speed skipped"] = "speed skipped"
    length: int | None
    reason: str


class StartupNotCompared(ArmGap):
    """Fewer than three starts on an arm (`count`: the fewest): no noise band."""

    kind: Literal["startup not compared"] = "startup not compared"
    count: int


# What was not measured, one class per kind of gap (`kind`, the tag); schema 19, where one
# class held every kind's optional fields.
Gap = Annotated[PlanGap | OneCostLoad | OneRun | ProbeOnSomeLoads | LoadsMissing
                | FirstRequestCached | CostLoadRefused | SweepPointsMissing | SweepPointsShort
                | SpeedSkipped | StartupNotCompared, Field(discriminator="kind")]


class FailedLaunch(Finding):
    arm: str
    load: int
    phase: Phase = "drift"
    attempt: int
    error: str | None
    died_before_stop: bool
    # servediff ended before it stopped this launch; the next run stopped it (found_alive:
    # its engine was still running then)
    at_resume: bool = False
    found_alive: bool | None = None


class PartialCell(Finding):
    arm: str
    load: int
    probe: str
    repeat: int
    # a batch cell's batch size (schema 20; before, `repeat` held it)
    batch_size: int | None = None
    launch: int
    rows: int
