"""The whole of `summary.json`."""

from __future__ import annotations

from pydantic import Field, JsonValue

from servediff.analysis.findings.base import SUMMARY_SCHEMA_VERSION, Finding
from servediff.analysis.findings.costs import ArmCosts, CostComparison
from servediff.analysis.findings.factors import Factors
from servediff.analysis.findings.gaps import FailedLaunch, Gap, PartialCell
from servediff.analysis.findings.generation import ArmPairGeneration
from servediff.analysis.findings.scores import ArmPair
from servediff.analysis.findings.setup import ArmConditions, Setup
from servediff.analysis.findings.signature import ArmDrift
from servediff.analysis.findings.verdict import DidNotStart, Verdict
from servediff.probes.base import Untested


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
