"""Flat per-text score rows of a bundle, for `servediff scores` and for export."""

from __future__ import annotations

from servediff.analysis.findings import Finding
from servediff.bundle import Evidence


class ScoreRow(Finding):
    arm: str
    load: int
    probe: str
    repeat: int
    launch: int
    tag: str
    prefix: str
    token_ids: list[int]
    n_tokens: int
    n_scored: int
    sum_nll: float | None
    status: str


def score_rows(evidence: Evidence, arm: str | None = None, load: int | None = None,
               probe: str | None = None) -> list[ScoreRow]:
    return [ScoreRow(arm=cell.arm, load=cell.load, probe=cell.probe, repeat=cell.repeat,
                     launch=cell.launch, tag=r.tag, prefix=r.prefix, token_ids=r.token_ids,
                     n_tokens=r.n_tokens, n_scored=r.n_scored, sum_nll=r.sum_nll,
                     status=r.status)
            for cell in evidence.cells
            if not ((arm and cell.arm != arm) or (load and cell.load != load)
                    or (probe and cell.probe != probe))
            for r in cell.records]
