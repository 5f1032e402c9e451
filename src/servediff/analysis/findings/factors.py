"""Factors: which one changes what, the design's effects and aliases, and what to ship."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servediff.analysis.findings.base import Band, Finding, Metric
from servediff.analysis.findings.verdict import Claim
from servediff.plan import Regime


class RegimeDrift(Finding):
    """Whether an arm reproduced its scores in one regime: `moved` of `of` (texts across
    loads or within a load; drifting groups under concurrency, `of` unknown there)."""

    regime: Regime
    # None: the regime was not measured on this arm
    reproducible: bool | None
    moved: int | None = None
    of: int | None = None


class FactorArm(Finding):
    """An arm of the factor design: its factors and its drift per regime."""

    arm: str
    factors: list[str]
    started: bool
    drift: list[RegimeDrift]
    # every regime of the plan's criterion (ship.require) measured and reproducible
    meets: bool


PropertyTopic = Literal["drift", "speed", "capacity", "survival", "startup", "starts",
                        "probe"]


class Property(Finding):
    """Something measured per arm: drift in a regime, speed at a length, level and metric,
    KV capacity or slots, survival at a level, start-up, whether it starts, or what a
    probe with a finding of its own compares."""

    topic: PropertyTopic
    regime: Regime | None = None
    metric: Metric | None = None
    length: int | None = None
    level: int | None = None
    what: Literal["kv", "concurrency"] | None = None
    # topic "probe": the section of the probe whose own finding it is (schema 11)
    probe: str | None = None


class Contrast(Finding):
    """Two arms that differ in one factor only: `without` and `with_factor`; `changed`
    None where the property was not measured (or not comparable) on both."""

    without: str
    with_factor: str
    changed: bool | None


Effect = Literal["always", "interaction", "never", "not measured"]


class Attribution(Finding):
    """Whether a factor changes a property: in every contrast (always), in some only
    (an interaction, with the factors present wherever it changed: `together_with`), in
    none within the noise band (never). `claims` are the claims behind each change."""

    factor: str
    property: Property
    effect: Effect
    together_with: list[str] = Field(default_factory=list)
    contrasts: list[Contrast]
    claims: list[Claim] = Field(default_factory=list)


class LeftOut(Finding):
    """A factor the answer leaves out, with the costs it would have brought: its arm
    (`arm`) against the chosen one (`against`)."""

    factor: str
    arm: str | None
    against: str | None
    costs: list[Claim]


class Ship(Finding):
    """What to ship: of the arms that meet the reproducibility criterion, the one with the
    fewest severe costs against the baseline (analysis.factors.severe), then the fewest
    factors, then the fewest other costs; its costs, every factor left out with what it
    would cost, and every factor it keeps only for its costs (the arm without it meets the
    criterion too, with more severe costs). When no arm meets it, `meets` is false and
    `arm` is the best one."""

    require: list[Regime]
    # regimes of ship.require that no arm measured (a probe off): left out of the criterion
    unmeasured: list[Regime] = Field(default_factory=list)
    threshold_abs_nll: float
    baseline: str
    arm: str | None
    factors: list[str]
    meets: bool
    costs: list[Claim]
    left_out: list[LeftOut]
    not_tested: list[str]
    # a design short of the full factorial: the factors it says meet the criterion (None:
    # it cannot say, see factors.design); schema 12
    predicted: list[str] | None = None
    # factors of the answer that the criterion does not need: each with the arm without
    # it (`arm`, which meets the criterion too) and that arm's costs against the answer
    # (`against`); schema 16
    kept: list[LeftOut] = Field(default_factory=list)


ExplanationKind = Literal["every arm", "no arm", "explained", "cannot tell apart",
                          "unexplained", "not measured"]


class Explanation(Finding):
    """Where a property holds across a design's arms (drift: the regime reproducible;
    any other: changed against the baseline), and the smallest factor sets whose presence
    matches it in every measured arm: one set (explained), several the arms cannot tell
    apart, or none up to three factors together (unexplained). Schema 12."""

    property: Property
    kind: ExplanationKind
    holds: list[str]
    fails: list[str]
    unmeasured: list[str] = Field(default_factory=list)
    sets: list[list[str]] = Field(default_factory=list)


class EffectEstimate(Finding):
    """A factor's main effect on a measured quantity under a design (analysis/effects.py):
    the mean over the arms with it minus the mean over those without, and its 95 % band
    from the spread between loads (None where no arm has two). Schema 14."""

    # the quantity, in words: "decode_tok_s at 512 tokens x1", "seconds to ready"
    what: str
    factor: str
    estimate: float
    band95: Band | None
    df: int
    # arms with and without the factor, and their loads
    arms: list[int]
    loads: list[int]
    # the effects this design cannot tell from it: the estimate is theirs as much
    aliases: list[str] = Field(default_factory=list)


class DesignFinding(Finding):
    """A fractional or screening design: which arms it measured of the full factorial's,
    its resolution and defining relation, the effects it aliases (main effects and
    two-factor interactions, "a x b"), and what its arms explain. Schema 12."""

    kind: Literal["fractional", "screening"]
    arms: int
    full_arms: int
    resolution: int | None
    defining: list[list[str]]
    aliases: list[list[str]]
    # main effects partly aliased with a two-factor interaction (screening designs)
    partial: int
    explanations: list[Explanation]
    # the confirmation arm measured after the design (its prediction, not among its arms),
    # and whether it meets the criterion (None: not measured yet)
    confirmation: str | None = None
    confirmed: bool | None = None
    # main effects on speed and start-up, with their bands (schema 14)
    effects: list[EffectEstimate] = Field(default_factory=list)


class Factors(Finding):
    """The factor design's arms, the attribution of each property, and what to ship; for
    a design short of the full factorial, what the design can tell (`design`)."""

    names: list[str]
    arms: list[FactorArm]
    attribution: list[Attribution]
    ship: Ship
    design: DesignFinding | None = None
