"""Flat per-text score rows of a bundle, for `servediff scores` and for export.

Each row says where its per-token logprobs first differ from the same text in a
reference cell of its arm: a score row from the arm's first scored load, a repeat or a
batch-size row from its own load's score pass (the comparisons the drift analysis makes).
"""

from __future__ import annotations

from servediff.analysis.compare import TextScore, moved_text
from servediff.analysis.findings import Finding, MovedText
from servediff.bundle import Evidence
from servediff.evidence import Cell, Record


class ScoreRow(Finding):
    arm: str
    load: int
    probe: str
    repeat: int
    # a batch cell's batch size (None: any other cell)
    batch_size: int | None
    launch: int
    tag: str
    prefix: str
    token_ids: list[int]
    n_tokens: int
    n_scored: int
    sum_nll: float | None
    status: str
    # the cell this row is compared with (None: it is the reference, or there is none),
    # the first position whose logprob differs (None: none does, or not comparable: ids or
    # logprobs missing), how many differ and by at most how much (nats)
    vs: str | None = None
    first_differs: int | None = None
    differing: int | None = None
    max_abs_token_delta: float | None = None


def _references(evidence: Evidence) -> dict[str, Cell]:
    """Each cell's reference cell, by cell name (none for a reference itself)."""
    scored = [c for c in evidence.cells if c.probe == "score"]
    first: dict[tuple[str, str], Cell] = {}
    for c in sorted(scored, key=lambda c: c.load):
        first.setdefault((c.arm, c.phase), c)
    own = {(c.arm, c.phase, c.load): c for c in scored}
    out = {}
    for cell in evidence.cells:
        ref = first.get((cell.arm, cell.phase)) if cell.probe == "score" else \
            own.get((cell.arm, cell.phase, cell.load))
        if ref is not None and ref.name != cell.name:
            out[cell.name] = ref
    return out


def _score(r: Record) -> TextScore:
    return TextScore(r.sum_nll or 0.0, r.token_ids, r.token_logprobs)


def _where(r: Record, ref: Cell | None) -> tuple[str | None, MovedText | None]:
    """The reference's name, and where the row first differs from it (None: the two are
    not comparable position by position)."""
    base = None if ref is None else next((x for x in ref.records if x.tag == r.tag), None)
    if ref is None or base is None:
        return None, None
    if base.token_ids != r.token_ids or not r.token_logprobs or \
            len(base.token_logprobs) != len(r.token_logprobs):
        return ref.name, None
    return ref.name, moved_text(r.tag, _score(base), _score(r))


def _row(cell: Cell, r: Record, ref: Cell | None) -> ScoreRow:
    vs, m = _where(r, ref)
    return ScoreRow(arm=cell.arm, load=cell.load, probe=cell.probe, repeat=cell.repeat,
                    batch_size=cell.batch_size,
                    launch=cell.launch, tag=r.tag, prefix=r.prefix, token_ids=r.token_ids,
                    n_tokens=r.n_tokens, n_scored=r.n_scored, sum_nll=r.sum_nll,
                    status=r.status, vs=vs, first_differs=None if m is None else m.first,
                    differing=None if m is None else m.differing,
                    max_abs_token_delta=None if m is None else m.max_abs)


def score_rows(evidence: Evidence, arm: str | None = None, load: int | None = None,
               probe: str | None = None) -> list[ScoreRow]:
    refs = _references(evidence)
    return [_row(cell, r, refs.get(cell.name))
            for cell in evidence.cells
            if not ((arm and cell.arm != arm) or (load and cell.load != load)
                    or (probe and cell.probe != probe))
            for r in cell.records]
