"""Writing the derived files of a bundle (summary.json, report.md, report.html) and
re-hashing it.

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
from servediff.bundle import Layout, evidence_sha256, read_evidence, verify, write_manifest
from servediff.report.html import render_html
from servediff.report.markdown import render
from servediff.scrub import describe, scrub, scrub_tree


def write_derived(root: Path) -> Summary:
    """Re-derive and re-hash; refuses a bundle whose files no longer match its manifest,
    since re-hashing it would launder the change."""
    layout = Layout(root)
    if layout.manifest.exists():
        verify(root)
    summary = summarize(read_evidence(root))
    atomic.write_json(layout.summary, summary.model_dump(mode="json"))
    markdown, clean = render_reports(summary, root)
    atomic.write_text(layout.report, markdown)
    atomic.write_text(layout.html, render_html(clean, markdown, f"servediff report: "
                                               f"{scrub(root.name).text}"))
    write_manifest(root)
    return summary


def render_reports(summary: Summary, root: Path) -> tuple[str, Summary]:
    """report.md's text and the scrubbed summary the HTML page is drawn from."""
    tree, counts = scrub_tree(summary.model_dump(mode="json"))
    clean = Summary.model_validate(tree)
    name = scrub(root.name)
    counts = Counter(counts) + name.counts
    text = render(clean, name.text, evidence_sha256(root))
    last = scrub(text)
    counts += last.counts
    markdown = (last.text + f"\nScrubbed before writing (placeholders HOST, USER, EMAIL, "
                f"/PATH/..., REDACTED): {describe(counts)}.\n")
    return markdown, clean
