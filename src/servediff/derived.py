"""Writing the derived files of a bundle (summary.json, report.md, report.html) and
re-hashing it, and a bisection's report (bisect.md, bisect.html) from its bisect.json.

summary.json is the analysis of the raw evidence, exactly as `servediff
rederive` recomputes it. The reports are for sharing: rendered from a
scrubbed copy of it, then scrubbed again as text, and they say what kinds of
thing were taken out and how many.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from servediff import atomic
from servediff.analysis.findings import Summary
from servediff.analysis.summary import summarize
from servediff.bisection import read_bisection
from servediff.bundle import Layout, evidence_sha256, read_evidence, verify, write_manifest
from servediff.report.bisect import bisect_html, bisect_markdown
from servediff.report.html import render_html
from servediff.report.markdown import render
from servediff.scrub import DEFAULT, Policy, describe, policy, scrub, scrub_tree


def write_derived(root: Path) -> Summary:
    """Re-derive and re-hash; refuses a bundle whose files no longer match its manifest,
    since re-hashing it would launder the change."""
    layout = Layout(root)
    if layout.manifest.exists():
        verify(root)
    evidence = read_evidence(root)
    summary = summarize(evidence)
    atomic.write_json(layout.summary, summary.model_dump(mode="json"))
    rules = policy(evidence.plan.scrub.allow_hosts, evidence.plan.scrub.deny_hosts)
    markdown, clean = render_reports(summary, root, rules)
    atomic.write_text(layout.report, markdown)
    atomic.write_text(layout.html, render_html(clean, markdown, f"servediff report: "
                                               f"{scrub(root.name, rules).text}"))
    write_manifest(root)
    return summary


def render_reports(summary: Summary, root: Path, rules: Policy = DEFAULT
                   ) -> tuple[str, Summary]:
    """report.md's text and the scrubbed summary the HTML page is drawn from."""
    tree, counts = scrub_tree(summary.model_dump(mode="json"), policy=rules)
    clean = Summary.model_validate(tree)
    name = scrub(root.name, rules)
    counts = Counter(counts) + name.counts
    text = render(clean, name.text, evidence_sha256(root))
    last = scrub(text, rules)
    counts += last.counts
    markdown = (last.text + f"\nScrubbed before writing (placeholders HOST, USER, EMAIL, "
                f"BUCKET, REPO, /PATH/..., REDACTED): {describe(counts)}.\n")
    return markdown, clean


BISECT_REPORT, BISECT_HTML = "bisect.md", "bisect.html"


def write_bisection_report(root: Path) -> Path:
    """bisect.md and bisect.html of the bisection in `root`, scrubbed as a run's reports
    are; returns bisect.md's path."""
    found = read_bisection(root)
    markdown = scrub(bisect_markdown(found), DEFAULT).text
    atomic.write_text(root / BISECT_REPORT, markdown)
    atomic.write_text(root / BISECT_HTML, bisect_html(found, markdown))
    return root / BISECT_REPORT
