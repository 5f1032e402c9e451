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
from typing import Literal

from servediff.analysis import stats
from servediff.analysis.concurrency import cache_split
from servediff.analysis.findings import (
    ArmGeneration,
    ArmPairGeneration,
    Divergence,
    GenerationComparison,
    LoadGeneration,
    LoadPairGeneration,
)
from servediff.bundle import Layout
from servediff.evidence import Cell, Group, Response


def majority(group: Group) -> Response | None:
    ok = [r for r in group.responses if r.status == "ok"]
    if not ok:
        return None
    top, _ = Counter(r.hash for r in ok).most_common(1)[0]
    return next(r for r in ok if r.hash == top)


def divergence(tag: str, a: Response, b: Response) -> Divergence:
    """Where two generations part: first differing token, else first differing logprob."""
    n = min(len(a.token_ids), len(b.token_ids))
    pos = next((i for i in range(n) if a.token_ids[i] != b.token_ids[i]), None)
    differs: Literal["tokens", "logprobs only"] = "tokens"
    if pos is None:
        pos = next((i for i in range(min(len(a.logprobs), len(b.logprobs)))
                    if a.logprobs[i] != b.logprobs[i]), n)
        differs = "logprobs only"
    return Divergence(tag=tag, first_position=pos, differs_in=differs,
                      a_continuation=a.token_ids[pos:], b_continuation=b.token_ids[pos:],
                      a_text=a.text, b_text=b.text)


def _compare(a: Mapping[str, Response | None], b: Mapping[str, Response | None]
             ) -> GenerationComparison:
    pairs = [(t, x, y) for t in a if t in b and (x := a[t]) is not None
             and (y := b[t]) is not None]
    diverged = [divergence(t, x, y) for t, x, y in pairs if x.hash != y.hash]
    return GenerationComparison(prompts=len(pairs), diverged=len(diverged),
                                diverged_ci95=stats.exact_ci(len(diverged), len(pairs)),
                                divergences=diverged)


def by_tag(cell: Cell) -> dict[str, Response | None]:
    return {g.tag or str(g.length): majority(g) for g in cell.groups}


def _within(cell: Cell) -> LoadGeneration:
    diverged = []
    for g in cell.groups:
        ok = [r for r in g.responses if r.status == "ok"]
        others = [r for r in ok if r.hash != ok[0].hash] if ok else []
        if others:
            diverged.append(divergence(g.tag or "", ok[0], others[0]))
    return LoadGeneration(load=cell.load, prompts=len(cell.groups), diverged=len(diverged),
                          diverged_ci95=stats.exact_ci(len(diverged), len(cell.groups)),
                          divergences=diverged)


def analyse_arm(cells: list[Cell]) -> ArmGeneration | None:
    mine = sorted((c for c in cells if c.probe == "generate"), key=lambda c: c.load)
    if not mine:
        return None
    across = [LoadPairGeneration(load_a=x.load, load_b=y.load,
                                 **_compare(by_tag(x), by_tag(y)).model_dump())
              for x, y in combinations(mine, 2)]
    splits = [x for cell in mine for g in cell.groups if (x := cache_split(g))]
    return ArmGeneration(within_load=[_within(c) for c in mine], across_load=across,
                         cache_splits=splits, cells=[Layout.cell_ref(c.name) for c in mine])


def across_arms(by_arm: Mapping[str, list[Cell]]) -> list[ArmPairGeneration]:
    firsts = {}
    for arm, cells in by_arm.items():
        mine = sorted((c for c in cells if c.probe == "generate"), key=lambda c: c.load)
        if mine:
            firsts[arm] = mine[0]
    return [ArmPairGeneration(arm_a=a, arm_b=b,
                              **_compare(by_tag(firsts[a]), by_tag(firsts[b])).model_dump())
            for a, b in combinations(firsts, 2)]
