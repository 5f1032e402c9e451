"""Writing the derived files of a bundle (summary.json, report.md) and re-hashing it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servediff import atomic
from servediff.analysis.summary import summarize
from servediff.bundle import Layout, evidence_sha256, read_evidence, verify, write_manifest
from servediff.report.markdown import render
from servediff.scrub import describe, scrub, scrub_tree


def write_derived(root: Path) -> dict[str, Any]:
    """Re-derive and re-hash; refuses a bundle whose files no longer match its manifest,
    since re-hashing it would launder the change."""
    layout = Layout(root)
    if layout.manifest.exists():
        verify(root)
    summary = summarize(read_evidence(root))
    atomic.write_json(layout.summary, summary)
    atomic.write_text(layout.report, render_markdown(summary, root))
    write_manifest(root)
    return summary


def render_markdown(summary: dict[str, Any], root: Path) -> str:
    """report.md, scrubbed: from a scrubbed copy of the summary, then a last pass over
    the text; it ends by saying what kinds were taken out and how many."""
    clean, counts = scrub_tree(summary)
    name = scrub(root.name)
    counts.update(name.counts)
    text = render(clean, name.text, evidence_sha256(root))
    last = scrub(text)
    counts.update(last.counts)
    return (last.text + f"\nScrubbed before writing (placeholders HOST, USER, EMAIL, "
            f"/PATH/..., REDACTED): {describe(counts)}.\n")
