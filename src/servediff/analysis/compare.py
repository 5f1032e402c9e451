"""Comparing two per-text score sets: which texts moved, by how much.

Used for every pair the drift analysis looks at (two loads, a repeat and
its score, two arms) and by `servediff compare` on score files from
anywhere. Two texts are comparable only when the same ids were scored; a
tag scored with different ids is counted apart, never compared.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servediff.analysis import stats
from servediff.analysis.boundaries import EngineShapes, boundary_hint
from servediff.analysis.findings import Comparison, FirstMoved, MovedText
from servediff.analysis.shapes import shared_shape


@dataclass(frozen=True)
class TextScore:
    sum_nll: float
    token_ids: Sequence[int] | None = None
    token_logprobs: Sequence[float] | None = None


def moved(delta: float, threshold: float) -> bool:
    """A text moved when |delta| exceeds the threshold; threshold 0 means any difference."""
    return delta != 0.0 if threshold == 0 else abs(delta) > threshold


def moved_text(tag: str, a: TextScore, b: TextScore) -> MovedText:
    """Where two scorings of one text (same ids) first differ, position by position."""
    la, lb = list(a.token_logprobs or []), list(b.token_logprobs or [])
    if not la or len(la) != len(lb):
        return MovedText(tag=tag, length=max(len(la), len(lb)), first=None, differing=0,
                         max_abs=0.0)
    diffs = [abs(y - x) for x, y in zip(la, lb, strict=True)]
    where = [i for i, d in enumerate(diffs) if d != 0.0]
    return MovedText(tag=tag, length=len(la), first=where[0] if where else None,
                     differing=len(where), max_abs=max(diffs))


def first_moved(texts: Sequence[MovedText]) -> FirstMoved | None:
    """The first-moved positions of the moved texts whose logprobs were stored."""
    known = [(t.first, t.first / t.length) for t in texts
             if t.first is not None and t.length > 0]
    if not known:
        return None
    firsts = [f for f, _ in known]
    fractions = [x for _, x in known]
    return FirstMoved(texts=len(known), from_start=sum(f == 0 for f in firsts),
                      min=min(firsts), median=statistics.median(firsts), max=max(firsts),
                      min_fraction=min(fractions), median_fraction=statistics.median(fractions),
                      max_fraction=max(fractions))


def compare(a: Mapping[str, TextScore], b: Mapping[str, TextScore],
            threshold: float = 0.0, shapes: EngineShapes | None = None) -> Comparison:
    """b minus a, per tag, over the tags both hold with the same ids; `shapes`: what the
    run knows of the shapes the engine computed them in (none: score files from
    elsewhere)."""
    common = [tag for tag in a if tag in b]
    ids_differ = [
        tag for tag in common
        if a[tag].token_ids is not None and b[tag].token_ids is not None
        and list(a[tag].token_ids or []) != list(b[tag].token_ids or [])
    ]
    tags = [tag for tag in common if tag not in set(ids_differ)]
    deltas = {tag: b[tag].sum_nll - a[tag].sum_nll for tag in tags}
    moved_tags = [tag for tag, d in deltas.items() if moved(d, threshold)]
    max_tag = max(deltas, key=lambda t: abs(deltas[t]), default=None)
    max_abs = abs(deltas[max_tag]) if max_tag is not None else 0.0
    identical = all(
        deltas[t] == 0.0
        and (a[t].token_logprobs is None or b[t].token_logprobs is None
             or list(a[t].token_logprobs or []) == list(b[t].token_logprobs or []))
        for t in tags
    )
    texts = [moved_text(tag, a[tag], b[tag]) for tag in moved_tags]
    lengths = {tag: len(ids) for tag in tags if (ids := a[tag].token_ids) is not None}
    scored = {tag: len(lp) for tag in tags if (lp := a[tag].token_logprobs)}
    shapes = shapes or EngineShapes()
    return Comparison(
        compared=len(tags),
        moved=len(moved_tags),
        moved_tags=moved_tags,
        moved_ci95=stats.exact_ci(len(moved_tags), len(tags)),
        max_abs_delta=max_abs,
        max_tag=max_tag if max_abs > 0 else None,
        mean_delta=sum(deltas.values()) / len(deltas) if deltas else 0.0,
        bit_identical=identical and bool(tags),
        ids_differ=ids_differ,
        only_a=sorted(set(a) - set(b)),
        only_b=sorted(set(b) - set(a)),
        deltas=deltas,
        moved_texts=texts,
        first_moved=first_moved(texts),
        shared_shape=shared_shape(moved_tags, lengths, shapes)
        if len(lengths) == len(tags) else None,
        boundary=boundary_hint(texts, scored, shapes),
    )
