"""What was not measured: gaps, failed launches and partial cells."""

from __future__ import annotations

from typing import Literal

from servediff.analysis.findings.base import Finding
from servediff.evidence import Phase

GapKind = Literal[
    "loads missing",            # an arm has `count` of `of` planned loads with a score cell
    "external endpoint",        # no reloads possible
    "one load",                 # one load per arm: cold reloads not compared
    "no repeat",                # no within-load repeat ran
    "first request cached",     # `count` cached tokens on the first request after a start
    "sweep points missing",     # `count` planned points not measured (first: length x level)
    "sweep points short",       # `count` points off the nominal length by more than
                                # `tolerance` (a fraction; schema 5 and before: `of`)
    "speed skipped",            # a speed length left out (`reason`)
    "startup not compared",     # fewer than three starts on an arm (`count` = the fewest)
    "one cost load",            # one cost load per arm: load-to-load noise not estimated
    "probe on some loads",      # probe `reason` ran in `count` of the `of` drift loads per arm
    "cost load refused",        # the quiet-box gate refused cost load `load` (`reason`)
    "cost loads missing",       # an arm has `count` of `of` planned cost loads with a cell
]


class Gap(Finding):
    kind: GapKind
    arm: str | None = None
    load: int | None = None
    phase: Phase | None = None
    # `count` of `of` (planned loads, drift loads, ...): both counts
    count: int | None = None
    of: int | None = None
    tolerance: float | None = None
    length: int | None = None
    level: int | None = None
    reason: str | None = None


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
    launch: int
    rows: int
