"""The drift signature: where the same input gave a different number, by regime."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servediff.analysis.findings.base import Finding
from servediff.analysis.findings.concurrency import ArmConcurrency
from servediff.analysis.findings.generation import ArmGeneration
from servediff.analysis.findings.scores import (
    BatchPair,
    LoadPair,
    LoadRow,
    RepeatPair,
    SkippedRepeat,
)
from servediff.evidence import CachePolicy, RequestKind

DriftKind = Literal["non-deterministic alone", "within-load", "batch-composition",
                    "cache-dependent", "across-load"]


class DriftFinding(Finding):
    """One place where the same input gave a different number, with its numbers.

    `scope` says which probe showed it:
      control      the concurrency probe's one-at-a-time requests disagreed
      repeat       a repeat pass (or greedy repeats) in the same load moved
      batch size   scoring at another batch size moved (`batch_sizes` vs
                   `arm_batch_size`; `control`: a same-size repeat held still)
      concurrency  identical requests disagreed in flight together (`request_kinds`,
                   from `length` tokens at `level`)
      cache split  responses served from the prefix cache differ from fresh ones
                   (`count` of `of` groups)
      cache arms   within-load drift with the cache on, while `reference_arm` with
                   it off held still
      loads        cold loads disagree (scores, generations or the control)
    """

    kind: DriftKind
    scope: Literal["control", "repeat", "batch size", "concurrency", "cache split",
                   "cache arms", "loads"]
    evidence: list[str] = Field(default_factory=list)
    count: int | None = None
    of: int | None = None
    request_kinds: list[RequestKind] = Field(default_factory=list)
    length: int | None = None
    level: int | None = None
    batch_sizes: list[int] = Field(default_factory=list)
    arm_batch_size: int | None = None
    control: bool | None = None
    reference_arm: str | None = None
    # across-load: the signature's one finding (drift between cold loads and nowhere else)
    only: bool = False


class Signature(Finding):
    """`drift` with its findings, or why nothing moved (or nothing could be compared)."""

    name: Literal["bit-identical", "stable within threshold", "not measured", "drift"]
    findings: list[DriftFinding] = Field(default_factory=list)

    @property
    def stable(self) -> bool:
        return self.name in ("bit-identical", "stable within threshold")

    def has(self, kind: DriftKind) -> bool:
        return any(f.kind == kind for f in self.findings)


class ArmDrift(Finding):
    loads: list[LoadRow]
    across_load: list[LoadPair]
    within_load: list[RepeatPair]
    within_load_skipped: list[SkippedRepeat]
    batch_size: list[BatchPair]
    concurrency: ArmConcurrency | None
    generation: ArmGeneration | None
    signature: Signature
    invalid_rows: int
    error_rows: int
    # whether the arm's drift loads served with a prefix cache (None: unknown)
    prefix_cache: bool | None
    # the JIT/autotune cache policy of its drift loads (None: not recorded or mixed), and
    # whether every cache was empty when each of them started
    cache_policy: CachePolicy | None = None
    caches_empty_at_start: list[bool | None] = Field(default_factory=list)
