"""Analysis of the generate probe: greedy continuations compared by hash.

Within a load (repeats of one prompt), across cold loads and across arms, a
prompt "diverged" when the majority results differ. For each divergence the
first token position where the two outputs part and both continuations are
reported, so a reader sees whether a logprob wobble changed the text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from itertools import combinations
from typing import Any

from servediff.analysis import stats
from servediff.analysis.concurrency import cache_split
from servediff.evidence import Cell, Group, Response


def majority(group: Group) -> Response | None:
    ok = [r for r in group.responses if r.status == "ok"]
    if not ok:
        return None
    top, _ = Counter(r.hash for r in ok).most_common(1)[0]
    return next(r for r in ok if r.hash == top)


def divergence(tag: str, a: Response, b: Response) -> dict[str, Any]:
    """Where two generations part: first differing token, else first differing logprob."""
    n = min(len(a.token_ids), len(b.token_ids))
    pos = next((i for i in range(n) if a.token_ids[i] != b.token_ids[i]), None)
    kind = "tokens"
    if pos is None:
        kind = "logprobs only"
        pos = next((i for i in range(min(len(a.logprobs), len(b.logprobs)))
                    if a.logprobs[i] != b.logprobs[i]), n)
    return {"tag": tag, "first_position": pos, "differs_in": kind,
            "a_continuation": a.token_ids[pos:], "b_continuation": b.token_ids[pos:],
            "a_text": a.text, "b_text": b.text}


def _compare(a: Mapping[str, Response | None], b: Mapping[str, Response | None]
             ) -> dict[str, Any]:
    tags = [t for t in a if t in b and a[t] is not None and b[t] is not None]
    diverged = [divergence(t, a[t], b[t]) for t in tags  # type: ignore[arg-type]
                if a[t].hash != b[t].hash]  # type: ignore[union-attr]
    return {"prompts": len(tags), "diverged": len(diverged),
            "diverged_ci95": stats.exact_ci(len(diverged), len(tags)), "divergences": diverged}


def by_tag(cell: Cell) -> dict[str, Response | None]:
    return {g.tag or str(g.length): majority(g) for g in cell.groups}


def analyse_arm(cells: list[Cell]) -> dict[str, Any] | None:
    mine = sorted((c for c in cells if c.probe == "generate"), key=lambda c: c.load)
    if not mine:
        return None
    within = []
    for cell in mine:
        diverged = []
        for g in cell.groups:
            ok = [r for r in g.responses if r.status == "ok"]
            others = [r for r in ok if r.hash != ok[0].hash] if ok else []
            if others:
                diverged.append(divergence(g.tag or "", ok[0], others[0]))
        within.append({"load": cell.load, "prompts": len(cell.groups),
                       "diverged": len(diverged),
                       "diverged_ci95": stats.exact_ci(len(diverged), len(cell.groups)),
                       "divergences": diverged})
    across = [{"load_a": x.load, "load_b": y.load, **_compare(by_tag(x), by_tag(y))}
              for x, y in combinations(mine, 2)]
    splits = [x for cell in mine for g in cell.groups if (x := cache_split(g))]
    return {"within_load": within, "across_load": across, "cache_splits": splits}


def across_arms(by_arm: Mapping[str, list[Cell]]) -> list[dict[str, Any]]:
    firsts = {}
    for arm, cells in by_arm.items():
        mine = sorted((c for c in cells if c.probe == "generate"), key=lambda c: c.load)
        if mine:
            firsts[arm] = mine[0]
    return [{"arm_a": a, "arm_b": b, **_compare(by_tag(firsts[a]), by_tag(firsts[b]))}
            for a, b in combinations(firsts, 2)]
