"""Reading a summary's claims and the prefix probe's finding in tests."""

from __future__ import annotations

from servediff.analysis.findings import Claim, ProbeFindingClaim, Summary
from servediff.probes.prefix import Prefix, PrefixFinding


def claim_topic(c: Claim) -> str:
    """A claim's topic, or the section of the probe whose claim it is."""
    return c.probe if isinstance(c, ProbeFindingClaim) else c.topic


def prefix_of(summary: Summary, arm: str) -> Prefix | None:
    """The prefix probe's finding for one arm (None: the arm has none)."""
    found = summary.probe_findings.get("prefix")
    return found.arms.get(arm) if isinstance(found, PrefixFinding) else None
