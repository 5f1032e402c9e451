"""Concurrency: identical requests in flight together, and responses served from the
prefix cache."""

from __future__ import annotations

from pydantic import Field

from servediff.analysis.findings.base import Band, Finding
from servediff.evidence import RequestKind, Skipped


class CacheSplit(Finding):
    """Responses served from a prefix cache vs computed fresh, in one group."""

    kind: RequestKind
    length: int
    level: int
    tag: str | None
    cached: int
    uncached: int
    differ: bool


class GroupRow(Finding):
    kind: RequestKind
    length: int
    level: int
    requests: int
    ok: int
    errors: int
    # distinct results; above level 1 the control's (level 1) result counts as one
    distinct: int
    off_majority: int
    # above level 1: responses whose result is not the control's (None: no stable control)
    off_control: int | None = None
    distinct_token_sequences: int
    majority_hash: str | None
    max_cached_tokens: int | None
    cache_split: CacheSplit | None


class GroupKey(Finding):
    kind: RequestKind
    length: int
    level: int


class FirstDrift(Finding):
    """The shortest drifting length, at the lowest level it drifts at."""

    length: int
    level: int
    kinds: list[RequestKind]


class LoadConcurrency(Finding):
    load: int
    launch: int
    groups: list[GroupRow]
    control_ok: bool
    control_failed: list[GroupKey]
    drifting_groups: int
    first_drift: FirstDrift | None
    skipped: list[Skipped]


class TableCell(Finding):
    kind: RequestKind
    length: int
    level: int
    distinct: int
    off_majority: int
    requests: int
    errors: int
    off_majority_ci95: Band | None
    # above level 1: responses whose result is not the control's, summed over loads
    off_control: int = 0


class ConcurrencyTable(Finding):
    kinds: list[RequestKind]
    lengths: list[int]
    levels: list[int]
    cells: list[TableCell]


class ControlAcrossLoads(Finding):
    """Per kind and length: the control's majority results of every load, compared."""

    kind: RequestKind
    length: int
    loads: list[int]
    distinct: int


class ArmConcurrency(Finding):
    loads: list[LoadConcurrency]
    table: ConcurrencyTable
    control_ok: bool
    batch_composition: bool
    first_drift: FirstDrift | None
    across_loads: list[ControlAcrossLoads]
    cache_splits: list[CacheSplit]
    # the cell files behind it
    cells: list[str] = Field(default_factory=list)
