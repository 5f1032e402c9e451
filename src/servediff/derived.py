"""Writing the derived files of a bundle (summary.json, report.md) and re-hashing it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servediff import atomic
from servediff.analysis.summary import summarize
from servediff.bundle import Layout, read_evidence, verify, write_manifest
from servediff.report.markdown import render


def write_derived(root: Path) -> dict[str, Any]:
    """Re-derive and re-hash; refuses a bundle whose files no longer match its manifest,
    since re-hashing it would launder the change."""
    layout = Layout(root)
    if layout.manifest.exists():
        verify(root)
    summary = summarize(read_evidence(root))
    atomic.write_json(layout.summary, summary)
    atomic.write_text(layout.report, render(summary, root.name))
    write_manifest(root)
    return summary
