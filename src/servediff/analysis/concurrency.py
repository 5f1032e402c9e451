"""Analysis of the concurrency probe: distinct results per (length, level), the control.

Pure functions of concurrency cells. A group of identical requests is stable
when every response has the same hash (generated ids and their logprobs) and,
above level 1, that hash is the control's. The level-1 groups are the negative
control: if they are not stable, the engine is not deterministic even alone,
and higher levels prove nothing about batching.
"""

from __future__ import annotations

from collections import Counter

from servediff.analysis import stats
from servediff.analysis.findings import (
    ArmConcurrency,
    CacheSplit,
    ConcurrencyTable,
    ControlAcrossLoads,
    FirstDrift,
    GroupKey,
    GroupRow,
    LoadConcurrency,
    TableCell,
)
from servediff.bundle import Layout
from servediff.evidence import Cell, Group, RequestKind


def cache_split(group: Group) -> CacheSplit | None:
    """Responses served from a prefix cache vs computed from scratch, in one group.

    None when the engine did not report cached tokens or every response was on
    the same side; otherwise the counts and whether the two sides disagree (the
    evidence of cache-dependent drift)."""
    ok = [r for r in group.responses if r.status == "ok" and r.cached_tokens is not None]
    cached = {r.hash for r in ok if r.cached_tokens}
    fresh = {r.hash for r in ok if not r.cached_tokens}
    if not cached or not fresh:
        return None
    return CacheSplit(kind=group.kind, length=group.length, level=group.level, tag=group.tag,
                      cached=sum(bool(r.cached_tokens) for r in ok),
                      uncached=sum(not r.cached_tokens for r in ok), differ=cached != fresh)


def controls(cell: Cell) -> dict[tuple[RequestKind, int], str]:
    """The control's result per (kind, length): the one hash of a stable level-1 group."""
    out: dict[tuple[RequestKind, int], str] = {}
    for g in cell.groups:
        hashes = {r.hash for r in g.responses if r.status == "ok" and r.hash is not None}
        if g.level == 1 and len(hashes) == 1:
            out[(g.kind, g.length)] = hashes.pop()
    return out


def group_rows(cell: Cell) -> list[GroupRow]:
    """One row per group. Above level 1 the control's result counts as one of the results:
    requests that all agree with each other but not with the same request sent alone
    drift with the batch they were computed in, too."""
    rows = []
    control = controls(cell)
    for g in cell.groups:
        ok = [r for r in g.responses if r.status == "ok"]
        hashes = Counter(r.hash for r in ok)
        majority_hash, majority = hashes.most_common(1)[0] if hashes else (None, 0)
        cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
        alone = control.get((g.kind, g.length)) if g.level > 1 else None
        rows.append(GroupRow(
            kind=g.kind, length=g.length, level=g.level, requests=len(g.responses),
            ok=len(ok), errors=len(g.responses) - len(ok),
            distinct=len(set(hashes) | ({alone} if alone and ok else set())),
            off_majority=len(ok) - majority,
            off_control=None if alone is None else sum(r.hash != alone for r in ok),
            distinct_token_sequences=len({tuple(r.token_ids) for r in ok}),
            majority_hash=majority_hash, max_cached_tokens=max(cached) if cached else None,
            cache_split=cache_split(g)))
    return rows


def analyse_load(cell: Cell) -> LoadConcurrency:
    rows = group_rows(cell)
    control_failed = [GroupKey(kind=r.kind, length=r.length, level=r.level)
                      for r in rows if r.level == 1 and r.distinct > 1]
    drifting = [r for r in rows if r.level > 1 and r.distinct > 1]
    return LoadConcurrency(load=cell.load, launch=cell.launch, groups=rows,
                           control_ok=not control_failed, control_failed=control_failed,
                           drifting_groups=len(drifting), first_drift=first_drift(drifting),
                           skipped=cell.skipped)


def first_drift(drifting: list[GroupRow]) -> FirstDrift | None:
    """The shortest drifting length, at the lowest level it drifts at, per request kind."""
    if not drifting:
        return None
    length = min(r.length for r in drifting)
    at = [r for r in drifting if r.length == length]
    level = min(r.level for r in at)
    kinds = sorted({r.kind for r in at if r.level == level})
    return FirstDrift(length=length, level=level, kinds=kinds)


def table(loads: list[LoadConcurrency]) -> ConcurrencyTable:
    """Length x level over every load: the most distinct results and the responses off
    the majority, summed over loads."""
    cells: dict[tuple[RequestKind, int, int], Counter[str]] = {}
    for load in loads:
        for r in load.groups:
            entry = cells.setdefault((r.kind, r.length, r.level), Counter())
            entry["distinct"] = max(entry["distinct"], r.distinct)
            entry["off_majority"] += r.off_majority
            entry["off_control"] += r.off_control or 0
            entry["requests"] += r.requests
            entry["errors"] += r.errors
    kinds: list[RequestKind] = [k for k in ("score", "generate")
                                if any(key[0] == k for key in cells)]
    lengths = sorted({n for _, n, _ in cells})
    levels = sorted({c for _, _, c in cells})
    return ConcurrencyTable(kinds=kinds, lengths=lengths, levels=levels, cells=[
        TableCell(kind=k, length=n, level=c, distinct=e["distinct"],
                  off_majority=e["off_majority"], off_control=e["off_control"],
                  requests=e["requests"], errors=e["errors"],
                  # exact interval on the rate of responses off the majority
                  off_majority_ci95=stats.exact_ci(e["off_majority"],
                                                   e["requests"] - e["errors"]))
        for k in kinds for n in lengths for c in levels if (e := cells.get((k, n, c)))])


def across_loads(loads: list[LoadConcurrency]) -> list[ControlAcrossLoads]:
    """Per kind and length: do the control (level 1) majority results agree between loads?"""
    out = []
    keys = sorted({(r.kind, r.length) for load in loads for r in load.groups})
    for kind, length in keys:
        hashes = {load.load: r.majority_hash for load in loads for r in load.groups
                  if (r.kind, r.length) == (kind, length) and r.level == 1}
        out.append(ControlAcrossLoads(kind=kind, length=length, loads=sorted(hashes),
                                      distinct=len(set(hashes.values()))))
    return out


def analyse_arm(cells: list[Cell]) -> ArmConcurrency | None:
    mine = sorted((c for c in cells if c.probe == "concurrency"), key=lambda c: c.load)
    if not mine:
        return None
    loads = [analyse_load(c) for c in mine]
    drifting = [load.first_drift for load in loads if load.first_drift]
    return ArmConcurrency(
        loads=loads, table=table(loads), control_ok=all(load.control_ok for load in loads),
        batch_composition=bool(drifting),
        first_drift=min(drifting, key=lambda d: (d.length, d.level)) if drifting else None,
        across_loads=across_loads(loads),
        cache_splits=[r.cache_split for load in loads for r in load.groups if r.cache_split],
        cells=[Layout.cell_ref(c.name) for c in mine])
