"""The verdict: claims per pair of arms, the fix and what was covered."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from servediff.analysis.findings.base import Finding
from servediff.analysis.findings.costs import (
    Limit,
    SpeedComparison,
    StartupComparison,
    SweepPointView,
    Trend,
)
from servediff.analysis.findings.signature import Signature

ClaimKind = Literal["drift", "cost", "gain", "within noise", "survival", "note"]


class DriftClaim(Finding):
    topic: Literal["drift"] = "drift"
    kind: ClaimKind
    evidence: list[str]
    arm: str
    load_a: int
    load_b: int
    moved: int
    compared: int
    max_abs_delta: float
    bit_identical: bool


class SignatureClaim(Finding):
    topic: Literal["signature"] = "signature"
    kind: ClaimKind = "note"
    evidence: list[str] = Field(default_factory=list)
    arm: str
    signature: Signature


class SpeedClaim(Finding):
    """A speed or TTFT comparison; measured on a busy machine it is a note whatever its
    size (one that follows run order keeps its kind and says so)."""

    topic: Literal["speed"] = "speed"
    kind: ClaimKind
    evidence: list[str]
    baseline: str
    arm: str
    comparison: SpeedComparison


class TrendClaim(Finding):
    topic: Literal["speed trend"] = "speed trend"
    kind: ClaimKind = "note"
    evidence: list[str] = Field(default_factory=list)
    arm: str
    trend: Trend


class CapacityClaim(Finding):
    """KV pool (`what` "kv") or maximum concurrency ("concurrency") of two arms."""

    topic: Literal["capacity"] = "capacity"
    kind: ClaimKind
    evidence: list[str]
    what: Literal["kv", "concurrency"]
    baseline: str
    arm: str
    value_a: int | float | None
    value_b: int | float | None


class FailureClaim(Finding):
    """A sweep failure of `arm`: a cost of the compared arm where the baseline held, a
    gain of the compared arm where only the baseline failed, or both failed."""

    topic: Literal["survival failure"] = "survival failure"
    kind: ClaimKind
    evidence: list[str]
    arm: str
    point: SweepPointView
    both_failed: bool
    gain_for: str | None = None
    # for single prompts: the range the failure starts in (schema 7)
    limit: Limit | None = None


class SurvivalClaim(Finding):
    topic: Literal["survival"] = "survival"
    kind: ClaimKind = "survival"
    evidence: list[str]
    arm: str
    largest_single: int | None
    failure: SweepPointView | None
    context_length: int | None
    reached_context: bool
    slow_from: int | None
    levels: list[int]
    lengths: list[int]
    limit: Limit | None = None


class StartupClaim(Finding):
    topic: Literal["startup"] = "startup"
    kind: ClaimKind
    evidence: list[str] = Field(default_factory=list)
    baseline: str
    arm: str
    comparison: StartupComparison


class DidNotStart(Finding):
    """An arm whose engine exited at start with an error of its own, the same at every
    attempt: its configuration does not exist on this stack, and nothing of it was
    measured."""

    arm: str
    message: str
    launches: int
    evidence: list[str]


class RefusedClaim(Finding):
    """An arm of the pair did not start (DidNotStart): a cost of the compared arm when the
    baseline started, a gain when only the baseline did not."""

    topic: Literal["refused"] = "refused"
    kind: ClaimKind
    evidence: list[str]
    arm: str
    message: str
    launches: int


class ProbeFindingClaim(Finding):
    """What a probe with a finding of its own says of `arm` against `baseline`
    (probes/base.py's ProbeClaim, from its `compare`), in its words (schema 11)."""

    topic: Literal["probe"] = "probe"
    kind: ClaimKind
    evidence: list[str] = Field(default_factory=list)
    probe: str
    baseline: str
    arm: str
    text: str
    # the probe's words for the regime it covers, whether what it compares is something
    # the server can or cannot do, and whether anything was compared (ProbeClaim); schema 17
    regime: str = ""
    severe: bool = False
    compared: bool = True


Claim = Annotated[DriftClaim | SignatureClaim | SpeedClaim | TrendClaim | CapacityClaim
                  | FailureClaim | SurvivalClaim | StartupClaim | RefusedClaim
                  | ProbeFindingClaim, Field(discriminator="topic")]


class Fix(Finding):
    """One arm stopped the reload drift the other showed."""

    fixed: str
    broken: str


class Coverage(Finding):
    """The regime the cost claims cover."""

    speed_lengths: list[int]
    speed_max_tokens: int | None
    # requests in flight the speed probe measured at
    speed_levels: list[int] = Field(default_factory=lambda: [1])
    sweep_top: int | None
    sweep_levels: list[int]
    # the probes with a finding of their own that covered something (each says what:
    # Probe.coverage); schema 17, where a `prefix` flag stood for the prefix probe
    probes: list[str] = Field(default_factory=list)
    capacity: bool
    drift_levels: list[int]


class Pair(Finding):
    baseline: str
    arm: str
    costs: int
    claims: list[Claim]
    coverage: Coverage
    not_tested: list[str]
    fix: Fix | None
    # the pair's arms with no measured cell that the engine did not refuse (their loads
    # failed otherwise or were never run): nothing of the pair was compared (schema 22)
    unmeasured: list[str] = Field(default_factory=list)


class Verdict(Finding):
    baseline: str
    pairs: list[Pair]
    coverage: Coverage
    not_tested: list[str]
