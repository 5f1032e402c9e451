"""Costs: speed, survival, KV capacity and start-up, per arm and compared."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from servediff.analysis.findings.base import Band, Finding, Metric
from servediff.evidence import Outcome, Phase, Skipped


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
