"""The drift signature: where the same input gave a different number, by regime."""

from __future__ import annotations

from typing import Annotated, Literal

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


class ControlDrift(Finding):
    """The concurrency probe's one-at-a-time requests disagreed: `count` of `of`."""

    scope: Literal["control"] = "control"
    kind: Literal["non-deterministic alone"] = "non-deterministic alone"
    evidence: list[str] = Field(default_factory=list)
    count: int
    of: int


class RepeatDrift(Finding):
    """A repeat pass (or greedy repeats) in the same load moved `count` of `of`."""

    scope: Literal["repeat"] = "repeat"
    kind: Literal["within-load"] = "within-load"
    evidence: list[str] = Field(default_factory=list)
    count: int
    of: int
    request_kinds: list[RequestKind] = Field(default_factory=list)


class BatchSizeDrift(Finding):
    """Scoring at another batch size (`batch_sizes` vs `arm_batch_size`) moved `count` of
    `of`; `control`: a same-size repeat held still."""

    scope: Literal["batch size"] = "batch size"
    kind: Literal["batch-composition"] = "batch-composition"
    evidence: list[str] = Field(default_factory=list)
    count: int
    of: int
    batch_sizes: list[int]
    arm_batch_size: int | None
    control: bool


class ConcurrencyDrift(Finding):
    """Identical requests (`request_kinds`) disagreed in flight together, first from
    `length` tokens at `level`; `count` drifting groups."""

    scope: Literal["concurrency"] = "concurrency"
    kind: Literal["batch-composition"] = "batch-composition"
    evidence: list[str] = Field(default_factory=list)
    count: int
    request_kinds: list[RequestKind]
    length: int
    level: int


class CacheSplitDrift(Finding):
    """Responses served from the prefix cache differ from fresh ones in `count` of `of`
    groups."""

    scope: Literal["cache split"] = "cache split"
    kind: Literal["cache-dependent"] = "cache-dependent"
    evidence: list[str] = Field(default_factory=list)
    count: int
    of: int


class CacheArmsDrift(Finding):
    """Within-load drift with the cache on, while `reference_arm` with it off held still."""

    scope: Literal["cache arms"] = "cache arms"
    kind: Literal["cache-dependent"] = "cache-dependent"
    evidence: list[str] = Field(default_factory=list)
    reference_arm: str


class LoadsDrift(Finding):
    """Cold loads disagree (scores, generations or the control): at most `count` of `of`
    texts between two loads; `only`: the signature's one finding."""

    scope: Literal["loads"] = "loads"
    kind: Literal["across-load"] = "across-load"
    evidence: list[str] = Field(default_factory=list)
    count: int
    of: int
    request_kinds: list[RequestKind] = Field(default_factory=list)
    only: bool = False


# One place where the same input gave a different number, by the probe that showed it
# (`scope`, the tag); schema 18, where one class held every scope's optional fields.
DriftFinding = Annotated[ControlDrift | RepeatDrift | BatchSizeDrift | ConcurrencyDrift
                         | CacheSplitDrift | CacheArmsDrift | LoadsDrift,
                         Field(discriminator="scope")]


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
