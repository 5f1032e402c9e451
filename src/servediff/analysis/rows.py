"""Flat per-text score rows of a bundle, for `servediff scores` and for export."""

from __future__ import annotations

from typing import Any

from servediff.bundle import Evidence


def score_rows(evidence: Evidence, arm: str | None = None, load: int | None = None,
               probe: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for cell in evidence.cells:
        if (arm and cell.arm != arm) or (load and cell.load != load) or \
                (probe and cell.probe != probe):
            continue
        for r in cell.records:
            rows.append({
                "arm": cell.arm, "load": cell.load, "probe": cell.probe, "repeat": cell.repeat,
                "launch": cell.launch, "tag": r.tag, "prefix": r.prefix,
                "token_ids": r.token_ids, "n_tokens": r.n_tokens, "n_scored": r.n_scored,
                "sum_nll": r.sum_nll, "status": r.status,
            })
    return rows
