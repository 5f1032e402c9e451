"""What the analysis finds, typed: the schema of `summary.json` (SUMMARY_SCHEMA_VERSION).

Analysis builds these from raw evidence and nothing else; `report/` turns them
into words. No sentence is stored here: a signature, a claim, a gap or a
reason is a kind plus its numbers and the evidence files behind it, so that
any renderer (terminal, Markdown, HTML, evidence packet) says the same thing
and `servediff rederive` compares numbers, not prose.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from servediff.evidence import CachePolicy, Outcome, Phase, RequestKind, Skipped
from servediff.plan import ProbesSpec, Regime
from servediff.probes.base import Untested

SUMMARY_SCHEMA_VERSION = 16

Metric = Literal["decode_tok_s", "prefill_tok_s", "ttft_s"]
Band = list[float]


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- comparisons of per-text scores -------------------------------------------------------

class MovedText(Finding):
    """Where a moved text's per-token logprobs first differ. Positions count scored
    tokens: 0 is the logprob of the text's second token given its first."""

    tag: str
    # scored positions in the text, and the first one whose logprob differs (None: the
    # per-token logprobs were not stored, or they are equal and only the sum moved)
    length: int
    first: int | None
    # how many positions differ, and the largest per-token |difference| (nats)
    differing: int
    max_abs: float


class FirstMoved(Finding):
    """The distribution of first-moved positions over a comparison's moved texts, as
    positions and as fractions of each text's length."""

    texts: int
    # how many moved texts differ from position 0 (another kernel from the start)
    from_start: int
    min: int
    median: float
    max: int
    min_fraction: float
    median_fraction: float
    max_fraction: float


class ShapeGroup(Finding):
    """The compared texts in one group of a shape fact: how many, how many moved, and
    the corrected one-sided Fisher p that the group holds more moved texts than chance."""

    value: int
    texts: int
    moved: int
    p_adjusted: float


class SharedShape(Finding):
    """Whether the moved texts share a shape: the compared texts grouped by `fact`, the
    shape fact that separated them best of the `facts_tried`. `length bucket`: the power
    of two at or above the text's token count; `compile bucket`: the bucket a compiled
    engine pads the text to (powers of two from its smallest); `chunks`: how many pieces
    of `size` tokens (the engine's `size_name`) the text is computed in. `named`: the
    values whose groups hold the moved texts beyond chance (corrected p < 0.05); `exact`:
    whether the moved texts are exactly the texts of the named groups."""

    fact: Literal["length bucket", "compile bucket", "chunks"]
    size_name: str | None = None
    size: int | None = None
    facts_tried: int = 1
    groups: list[ShapeGroup]
    named: list[int]
    exact: bool
    # the corrected p of the named groups taken together, corrected over the facts tried
    # too (None: none named)
    p_adjusted: float | None


class BoundaryHint(Finding):
    """A size the engine computes a long prompt in (its own name for it, and `tokens`)
    before which every moved text was still identical: the likely boundary, a hint. The
    evidence: of the `texts` moved texts whose positions are known, how many first differ
    exactly at a multiple of it; of the compared texts longer (more scored positions) and
    not longer than it, how many moved."""

    name: str
    tokens: int
    texts: int
    at_multiple: int
    longer: int
    longer_moved: int
    shorter: int
    shorter_moved: int


class Comparison(Finding):
    """b minus a over the texts both scored with the same ids."""

    compared: int
    moved: int
    moved_tags: list[str]
    # exact 95 % interval of the rate behind moved / compared
    moved_ci95: Band | None
    max_abs_delta: float
    max_tag: str | None
    mean_delta: float
    bit_identical: bool
    ids_differ: list[str] = Field(default_factory=list)
    only_a: list[str] = Field(default_factory=list)
    only_b: list[str] = Field(default_factory=list)
    # b - a per compared text
    deltas: dict[str, float] = Field(default_factory=dict)
    # per moved text, where its logprobs first differ (schema 8), and their distribution
    moved_texts: list[MovedText] = Field(default_factory=list)
    first_moved: FirstMoved | None = None
    # which shape the moved texts share (None: nothing moved, everything did, or the
    # compared texts fall in one group)
    shared_shape: SharedShape | None = None
    # the engine size at or before which every moved text was still identical (None:
    # none, or the run knows no sizes of the engine)
    boundary: BoundaryHint | None = None


class LoadPair(Comparison):
    load_a: int
    load_b: int


class RepeatPair(Comparison):
    load: int
    repeat: int


class BatchPair(Comparison):
    load: int
    batch_size: int
    arm_batch_size: int | None


class SkippedRepeat(Finding):
    load: int
    repeat: int
    reason: Literal["different launches"]


class Discordant(Finding):
    """Texts that moved between cold loads under one arm only (paired on texts)."""

    texts: int
    moved_in_a_only: int
    moved_in_b_only: int
    mcnemar_p: float | None


ShiftKind = Literal["no arm shift", "arm shift", "arms differ and an arm drifts"]


class ArmPair(Comparison):
    arm_a: str
    arm_b: str
    load_a: int
    load_b: int
    signature: ShiftKind
    reload_discordant: Discordant


class LoadRow(Finding):
    load: int
    launch: int
    texts: int
    ok: int
    invalid: int
    errors: int
    tokens_scored: int
    sum_nll: float
    perplexity: float | None


# --- concurrency ----------------------------------------------------------------------------

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


# --- generation -------------------------------------------------------------------------------

class Divergence(Finding):
    tag: str
    first_position: int
    differs_in: Literal["tokens", "logprobs only"]
    a_continuation: list[int]
    b_continuation: list[int]
    a_text: str
    b_text: str


class GenerationComparison(Finding):
    prompts: int
    diverged: int
    diverged_ci95: Band | None
    divergences: list[Divergence]


class LoadGeneration(GenerationComparison):
    load: int


class LoadPairGeneration(GenerationComparison):
    load_a: int
    load_b: int


class ArmPairGeneration(GenerationComparison):
    arm_a: str
    arm_b: str


class ArmGeneration(Finding):
    within_load: list[LoadGeneration]
    across_load: list[LoadPairGeneration]
    cache_splits: list[CacheSplit]
    cells: list[str] = Field(default_factory=list)


# --- the drift signature ------------------------------------------------------------------

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


# --- costs ------------------------------------------------------------------------------------

class MetricStats(Finding):
    values: list[float]
    mean: float | None
    band95: Band | None
    monotone_drift: bool
    # the load (a cost load's launch, numbered in run order from 0) each value is from
    groups: list[int] = Field(default_factory=list)


class SpeedAtLength(Finding):
    prompt_tokens: int
    # requests in flight together (1: one at a time)
    concurrency: int = 1
    replicates: int
    errors: int
    cells: list[str]
    # the cells measured on a busy machine (a gate that marked, or other processes using
    # CPU or the GPU while the cell ran), with why
    busy: dict[str, list[str]] = Field(default_factory=dict)
    # the machines (room.py) its replicates were measured on
    rooms: list[str] = Field(default_factory=list)
    decode_tok_s: MetricStats
    prefill_tok_s: MetricStats
    ttft_s: MetricStats
    # how the requests were sent (the speed probe's mode); the steady mode's streamed
    # inter-token latency, and the output throughput (None where nothing measured them)
    mode: Literal["burst", "steady"] = "burst"
    itl_s: MetricStats | None = None
    throughput_tok_s: MetricStats | None = None

    def metric(self, name: Metric) -> MetricStats:
        stats: MetricStats = getattr(self, name)
        return stats


class Trend(Finding):
    prompt_tokens: int
    metric: Metric
    concurrency: int = 1


class Speed(Finding):
    per_length: list[SpeedAtLength]
    monotone_drift: list[Trend]
    skipped: list[Skipped] = Field(default_factory=list)


class SweepPointView(Finding):
    length: int
    level: int
    outcome: Outcome
    beyond_context: bool
    # a hang, timeout or death anywhere; an error response inside the context
    failure: bool
    achieved_ok: bool | None
    achieved_prompt_tokens: list[int | None]
    http_status: int | None
    error: str | None
    returncode: int | None
    signal: str | None
    health_answered: bool | None
    seconds: float
    launch: int


class Limit(Finding):
    """Where single prompts stop surviving, as the sweep's bisection narrowed it: the
    longest that held below the shortest that failed, and that failure's outcome."""

    survives: int
    fails_from: int
    outcome: Outcome
    # the bisection's target width (sweep.resolution) and whether it was reached
    resolution: int
    resolved: bool


class Survival(Finding):
    context_length: int | None
    complete: bool
    points: list[SweepPointView]
    levels: list[int]
    lengths: list[int]
    # per level (as a string key): the longest length that answered, the first failure
    largest_ok_length: dict[str, int | None]
    first_failure: dict[str, SweepPointView | None]
    not_measured: list[tuple[int, int]]
    cell: str
    skipped: list[Skipped]
    # single prompts: where they stop surviving (schema 7)
    limit: Limit | None = None


class CapacitySeen(Finding):
    """What one launch reported, as the engine named it (kv_tokens, total_slots, ...)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    load: int
    phase: Phase
    attempt: int


class Capacity(Finding):
    launches: list[CapacitySeen]
    kv_tokens: int | None
    kv_tokens_varied: bool
    max_concurrency: float | None
    reported: bool
    evidence: list[str] = Field(default_factory=list)


class PrefixLoad(Finding):
    load: int
    ok: int
    prompt_tokens: int | None = None
    first_ttft_s: float | None = None
    first_cached_tokens: int | None = None
    later_ttft_s: float | None = None
    later_cached_tokens: int | None = None
    cached_reported: bool | None = None


class Prefix(Finding):
    loads: list[PrefixLoad]
    cells: list[str]
    prompt_tokens: int | None
    later_cached_tokens: int | None
    cached_reported: bool
    first_over_later_ttft: float | None
    later_ttft_s: float | None


class Startup(Finding):
    seconds_to_ready: list[float]
    mean: float | None
    band95: Band | None
    # the machines (room.py) the starts were timed on
    rooms: list[str] = Field(default_factory=list)


class ArmCosts(Finding):
    speed: Speed | None
    survival: Survival | None
    capacity: Capacity
    prefix: Prefix | None
    startup: Startup


SpeedVerdict = Literal["cost", "gain", "within noise", "not enough replicates"]


class SpeedComparison(Finding):
    """Arm b against arm a at one prompt length and metric."""

    prompt_tokens: int
    metric: Metric
    verdict: SpeedVerdict
    concurrency: int = 1
    mean_a: float | None
    mean_b: float | None
    difference: float | None
    difference_band95: Band | None
    # the mean of each cost load (a, b), and whether they overlap: replicates of one load
    # share its process, kernels, clocks and placement, so a band over them leaves out
    # the noise between loads; with two cost loads an arm or more, a difference whose
    # loads overlap is within that noise, whatever the band says
    load_means: list[list[float]] = Field(default_factory=list)
    loads_overlap: bool = False
    relative: float | None
    replicates: list[int]
    cells: list[str]
    # cells behind it that were measured on a busy machine: then it is no cost claim
    busy: list[str] = Field(default_factory=list)
    # the machines its cells were measured on: more than one, and it is no cost claim
    rooms: list[str] = Field(default_factory=list)
    # the difference follows run order more than arm (first half vs second half of the
    # cost loads in the order they ran, against arm b vs arm a)
    order_difference: float | None = None
    follows_order: bool = False


class StartupComparison(Finding):
    mean_a: float
    mean_b: float
    band95: Band
    verdict: Literal["cost", "gain", "within noise"]
    starts: list[int]
    # the machines the starts were timed on: more than one, and it is no cost claim
    rooms: list[str] = Field(default_factory=list)


class CostComparison(Finding):
    """Everything the cost analysis compares between two arms; the verdict reads it."""

    baseline: str
    arm: str
    speed: list[SpeedComparison]
    # None: fewer than three starts on an arm, no band (`starts` says how many)
    startup: StartupComparison | None
    starts: list[int]


# --- the verdict ------------------------------------------------------------------------------

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


class PrefixClaim(Finding):
    topic: Literal["prefix"] = "prefix"
    kind: ClaimKind
    evidence: list[str]
    baseline: str
    arm: str
    prompt_tokens: int | None
    cached_a: int | None
    cached_b: int | None
    later_ttft_a: float | None
    later_ttft_b: float | None


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


Claim = Annotated[DriftClaim | SignatureClaim | SpeedClaim | TrendClaim | CapacityClaim
                  | FailureClaim | SurvivalClaim | PrefixClaim | StartupClaim | RefusedClaim
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
    prefix: bool
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


class Verdict(Finding):
    baseline: str
    pairs: list[Pair]
    coverage: Coverage
    not_tested: list[str]


# --- factors: which one changes what, and what to ship (schema 7) ---------------------------

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


PropertyTopic = Literal["drift", "speed", "capacity", "survival", "prefix", "startup",
                        "starts", "probe"]


class Property(Finding):
    """Something measured per arm: drift in a regime, speed at a length, level and metric,
    KV capacity or slots, survival at a level, prefix reuse, start-up, whether it starts,
    or what a probe with a finding of its own compares."""

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


# --- what was not measured --------------------------------------------------------------------

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


class CorpusSetup(Finding):
    name: str
    texts: int


class ArmSetup(Finding):
    args: list[str]
    env: dict[str, str]
    options: dict[str, JsonValue]
    command: list[str] | None
    launches: int
    external: bool
    seconds_to_ready: list[float]
    capacity: dict[str, JsonValue]
    cache_isolation: list[str]
    first_request_cached_tokens: list[int | None]
    cache_policy: CachePolicy | None = None
    # what the engine printed about each start (compile time, compile-cache use)
    startup: list[dict[str, JsonValue]] = Field(default_factory=list)


class ArmConditions(Finding):
    """What the box was doing while an arm's cells ran (before and after each)."""

    machines: list[str]
    foreign_cpu_cores_max: float | None
    loadavg_max: float | None
    gpu_sm_clock_mhz: list[int]
    gpu_temperature_c_max: int | None
    throttled_cells: int
    busy_cells: int
    gates: int
    gates_not_quiet: int
    # the GPUs an engine of the arm computed on, as NVML listed its processes at a reading
    # ("GPU 0 (NVIDIA H200)", prefixed with the Ray node on a cluster); schema 4
    gpus_used: list[str] = Field(default_factory=list)


class Setup(Finding):
    corpus: CorpusSetup
    prefix: str | int
    loads_per_arm: int
    cost_loads_per_arm: int | None
    # each arm's cost loads where the adaptive rule added some (schema 13)
    cost_loads: dict[str, int] = Field(default_factory=dict)
    # "combined": each drift load also ran the cost load of its number (schema 15)
    loads: Literal["separate", "combined"] = "separate"
    repeats: int
    probes: ProbesSpec
    context_lengths: list[int]
    arms: dict[str, ArmSetup]
    engine_versions: list[str]
    weights_sha256: list[str]
    devices: list[str]
    cpu: list[str]
    gpus: list[str]
    python: list[str]


class Summary(Finding):
    schema_version: int = SUMMARY_SCHEMA_VERSION
    plan_sha256: str
    engine: str
    model: str
    threshold_abs_nll: float
    arms: dict[str, ArmDrift]
    arm_shifts: list[ArmPair]
    generation_arm_shifts: list[ArmPairGeneration]
    failed_launches: list[FailedLaunch]
    # arms whose engine refused to start them (their configuration does not exist here)
    did_not_start: list[DidNotStart] = Field(default_factory=list)
    cells: int
    partial_cells: list[PartialCell]
    invalid_rows: int
    error_rows: int
    setup: Setup
    detectable_rate: float | None
    gaps: list[Gap]
    costs: dict[str, ArmCosts]
    comparisons: list[CostComparison]
    conditions: dict[str, ArmConditions] = Field(default_factory=dict)
    untested: dict[str, Untested]
    # the findings of probes whose analysis is their own (probes/base.py: `analyse`), by
    # the probe's section, as the probe's model dumps them; schema 6
    probe_findings: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    verdict: Verdict
    # a plan with [factors]: which factor changes what, and what to ship; schema 7
    factors: Factors | None = None
