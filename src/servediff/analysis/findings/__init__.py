"""What the analysis finds, typed: the schema of `summary.json` (SUMMARY_SCHEMA_VERSION).

Analysis builds these from raw evidence and nothing else; `report/` turns them
into words. No sentence is stored here: a signature, a claim, a gap or a
reason is a kind plus its numbers and the evidence files behind it, so that
any renderer (terminal, Markdown, HTML, evidence packet) says the same thing
and `servediff rederive` compares numbers, not prose.
"""

from __future__ import annotations

from servediff.analysis.findings.base import (
    SUMMARY_SCHEMA_VERSION as SUMMARY_SCHEMA_VERSION,
)
from servediff.analysis.findings.base import (
    Band as Band,
)
from servediff.analysis.findings.base import (
    Finding as Finding,
)
from servediff.analysis.findings.base import (
    Metric as Metric,
)
from servediff.analysis.findings.concurrency import (
    ArmConcurrency as ArmConcurrency,
)
from servediff.analysis.findings.concurrency import (
    CacheSplit as CacheSplit,
)
from servediff.analysis.findings.concurrency import (
    ConcurrencyTable as ConcurrencyTable,
)
from servediff.analysis.findings.concurrency import (
    ControlAcrossLoads as ControlAcrossLoads,
)
from servediff.analysis.findings.concurrency import (
    FirstDrift as FirstDrift,
)
from servediff.analysis.findings.concurrency import (
    GroupKey as GroupKey,
)
from servediff.analysis.findings.concurrency import (
    GroupRow as GroupRow,
)
from servediff.analysis.findings.concurrency import (
    LoadConcurrency as LoadConcurrency,
)
from servediff.analysis.findings.concurrency import (
    TableCell as TableCell,
)
from servediff.analysis.findings.costs import (
    ArmCosts as ArmCosts,
)
from servediff.analysis.findings.costs import (
    Capacity as Capacity,
)
from servediff.analysis.findings.costs import (
    CapacitySeen as CapacitySeen,
)
from servediff.analysis.findings.costs import (
    CostComparison as CostComparison,
)
from servediff.analysis.findings.costs import (
    Limit as Limit,
)
from servediff.analysis.findings.costs import (
    MetricStats as MetricStats,
)
from servediff.analysis.findings.costs import (
    Speed as Speed,
)
from servediff.analysis.findings.costs import (
    SpeedAtLength as SpeedAtLength,
)
from servediff.analysis.findings.costs import (
    SpeedComparison as SpeedComparison,
)
from servediff.analysis.findings.costs import (
    SpeedVerdict as SpeedVerdict,
)
from servediff.analysis.findings.costs import (
    Startup as Startup,
)
from servediff.analysis.findings.costs import (
    StartupComparison as StartupComparison,
)
from servediff.analysis.findings.costs import (
    Survival as Survival,
)
from servediff.analysis.findings.costs import (
    SweepPointView as SweepPointView,
)
from servediff.analysis.findings.costs import (
    Trend as Trend,
)
from servediff.analysis.findings.factors import (
    Attribution as Attribution,
)
from servediff.analysis.findings.factors import (
    Contrast as Contrast,
)
from servediff.analysis.findings.factors import (
    DesignFinding as DesignFinding,
)
from servediff.analysis.findings.factors import (
    Effect as Effect,
)
from servediff.analysis.findings.factors import (
    EffectEstimate as EffectEstimate,
)
from servediff.analysis.findings.factors import (
    Explanation as Explanation,
)
from servediff.analysis.findings.factors import (
    ExplanationKind as ExplanationKind,
)
from servediff.analysis.findings.factors import (
    FactorArm as FactorArm,
)
from servediff.analysis.findings.factors import (
    Factors as Factors,
)
from servediff.analysis.findings.factors import (
    LeftOut as LeftOut,
)
from servediff.analysis.findings.factors import (
    Property as Property,
)
from servediff.analysis.findings.factors import (
    PropertyTopic as PropertyTopic,
)
from servediff.analysis.findings.factors import (
    RegimeDrift as RegimeDrift,
)
from servediff.analysis.findings.factors import (
    Ship as Ship,
)
from servediff.analysis.findings.gaps import (
    ArmGap as ArmGap,
)
from servediff.analysis.findings.gaps import (
    CostLoadRefused as CostLoadRefused,
)
from servediff.analysis.findings.gaps import (
    FailedLaunch as FailedLaunch,
)
from servediff.analysis.findings.gaps import (
    FirstRequestCached as FirstRequestCached,
)
from servediff.analysis.findings.gaps import (
    Gap as Gap,
)
from servediff.analysis.findings.gaps import (
    LoadsMissing as LoadsMissing,
)
from servediff.analysis.findings.gaps import (
    OneCostLoad as OneCostLoad,
)
from servediff.analysis.findings.gaps import (
    OneRun as OneRun,
)
from servediff.analysis.findings.gaps import (
    PartialCell as PartialCell,
)
from servediff.analysis.findings.gaps import (
    PlanGap as PlanGap,
)
from servediff.analysis.findings.gaps import (
    ProbeOnSomeLoads as ProbeOnSomeLoads,
)
from servediff.analysis.findings.gaps import (
    SpeedSkipped as SpeedSkipped,
)
from servediff.analysis.findings.gaps import (
    StartupNotCompared as StartupNotCompared,
)
from servediff.analysis.findings.gaps import (
    SweepPointsMissing as SweepPointsMissing,
)
from servediff.analysis.findings.gaps import (
    SweepPointsShort as SweepPointsShort,
)
from servediff.analysis.findings.generation import (
    ArmGeneration as ArmGeneration,
)
from servediff.analysis.findings.generation import (
    ArmPairGeneration as ArmPairGeneration,
)
from servediff.analysis.findings.generation import (
    Divergence as Divergence,
)
from servediff.analysis.findings.generation import (
    GenerationComparison as GenerationComparison,
)
from servediff.analysis.findings.generation import (
    LoadGeneration as LoadGeneration,
)
from servediff.analysis.findings.generation import (
    LoadPairGeneration as LoadPairGeneration,
)
from servediff.analysis.findings.scores import (
    ArmPair as ArmPair,
)
from servediff.analysis.findings.scores import (
    BatchPair as BatchPair,
)
from servediff.analysis.findings.scores import (
    BoundaryHint as BoundaryHint,
)
from servediff.analysis.findings.scores import (
    Comparison as Comparison,
)
from servediff.analysis.findings.scores import (
    Discordant as Discordant,
)
from servediff.analysis.findings.scores import (
    FirstMoved as FirstMoved,
)
from servediff.analysis.findings.scores import (
    LoadPair as LoadPair,
)
from servediff.analysis.findings.scores import (
    LoadRow as LoadRow,
)
from servediff.analysis.findings.scores import (
    MovedText as MovedText,
)
from servediff.analysis.findings.scores import (
    RepeatPair as RepeatPair,
)
from servediff.analysis.findings.scores import (
    ShapeGroup as ShapeGroup,
)
from servediff.analysis.findings.scores import (
    SharedShape as SharedShape,
)
from servediff.analysis.findings.scores import (
    ShiftKind as ShiftKind,
)
from servediff.analysis.findings.scores import (
    SkippedRepeat as SkippedRepeat,
)
from servediff.analysis.findings.setup import (
    ArmConditions as ArmConditions,
)
from servediff.analysis.findings.setup import (
    ArmSetup as ArmSetup,
)
from servediff.analysis.findings.setup import (
    CorpusSetup as CorpusSetup,
)
from servediff.analysis.findings.setup import (
    Setup as Setup,
)
from servediff.analysis.findings.signature import (
    ArmDrift as ArmDrift,
)
from servediff.analysis.findings.signature import (
    BatchSizeDrift as BatchSizeDrift,
)
from servediff.analysis.findings.signature import (
    CacheArmsDrift as CacheArmsDrift,
)
from servediff.analysis.findings.signature import (
    CacheSplitDrift as CacheSplitDrift,
)
from servediff.analysis.findings.signature import (
    ConcurrencyDrift as ConcurrencyDrift,
)
from servediff.analysis.findings.signature import (
    ControlDrift as ControlDrift,
)
from servediff.analysis.findings.signature import (
    DriftFinding as DriftFinding,
)
from servediff.analysis.findings.signature import (
    DriftKind as DriftKind,
)
from servediff.analysis.findings.signature import (
    LoadsDrift as LoadsDrift,
)
from servediff.analysis.findings.signature import (
    RepeatDrift as RepeatDrift,
)
from servediff.analysis.findings.signature import (
    Signature as Signature,
)
from servediff.analysis.findings.summary import (
    Summary as Summary,
)
from servediff.analysis.findings.verdict import (
    CapacityClaim as CapacityClaim,
)
from servediff.analysis.findings.verdict import (
    Claim as Claim,
)
from servediff.analysis.findings.verdict import (
    ClaimKind as ClaimKind,
)
from servediff.analysis.findings.verdict import (
    Coverage as Coverage,
)
from servediff.analysis.findings.verdict import (
    DidNotStart as DidNotStart,
)
from servediff.analysis.findings.verdict import (
    DriftClaim as DriftClaim,
)
from servediff.analysis.findings.verdict import (
    FailureClaim as FailureClaim,
)
from servediff.analysis.findings.verdict import (
    Fix as Fix,
)
from servediff.analysis.findings.verdict import (
    Pair as Pair,
)
from servediff.analysis.findings.verdict import (
    ProbeFindingClaim as ProbeFindingClaim,
)
from servediff.analysis.findings.verdict import (
    RefusedClaim as RefusedClaim,
)
from servediff.analysis.findings.verdict import (
    SignatureClaim as SignatureClaim,
)
from servediff.analysis.findings.verdict import (
    SpeedClaim as SpeedClaim,
)
from servediff.analysis.findings.verdict import (
    StartupClaim as StartupClaim,
)
from servediff.analysis.findings.verdict import (
    SurvivalClaim as SurvivalClaim,
)
from servediff.analysis.findings.verdict import (
    TrendClaim as TrendClaim,
)
from servediff.analysis.findings.verdict import (
    Verdict as Verdict,
)
