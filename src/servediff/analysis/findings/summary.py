"""The whole of `summary.json`."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, SerializeAsAny

from servediff import probes
from servediff.analysis.findings.base import SUMMARY_SCHEMA_VERSION, Finding
from servediff.analysis.findings.costs import ArmCosts, CostComparison
from servediff.analysis.findings.factors import Factors
from servediff.analysis.findings.gaps import FailedLaunch, Gap, PartialCell
from servediff.analysis.findings.generation import ArmPairGeneration
from servediff.analysis.findings.scores import ArmPair
from servediff.analysis.findings.setup import ArmConditions, Setup
from servediff.analysis.findings.signature import ArmDrift
from servediff.analysis.findings.verdict import DidNotStart, Verdict
from servediff.probes.base import ProbeFinding, Untested


def _by_probe(stored: object) -> object:
    """Each probe's finding read back as the model its probe names (Probe.finding): the
    section is the tag."""
    if not isinstance(stored, dict):
        return stored
    out = {}
    for section, finding in stored.items():
        try:
            probe = probes.by_section(section)
        except KeyError:
            raise ValueError(f"probe_findings.{section}: no registered probe has this "
                             "section") from None
        out[section] = probe.read(finding)
    return out


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
    # the probe's section, each of its probe's model; schema 6 (17: the prefix probe's)
    probe_findings: Annotated[dict[str, SerializeAsAny[ProbeFinding]],
                              BeforeValidator(_by_probe)] = Field(default_factory=dict)
    verdict: Verdict
    # a plan with [factors]: which factor changes what, and what to ship; schema 7
    factors: Factors | None = None
