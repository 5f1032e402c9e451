"""Analysis of the concurrency probe: distinct results per (length, level), the control.

Pure functions of concurrency cells. A group of identical requests is stable
when every response has the same hash (generated ids and their logprobs). The
level-1 groups are the negative control: if they are not stable, the engine is
not deterministic even alone, and higher levels prove nothing about batching.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from servediff.analysis import stats
from servediff.evidence import Cell, Group


def cache_split(group: Group) -> dict[str, Any] | None:
    """Responses served from a prefix cache vs computed from scratch, in one group.

    None when the engine did not report cached tokens or every response was on
    the same side; otherwise the counts and whether the two sides disagree (the
    evidence of cache-dependent drift)."""
    ok = [r for r in group.responses if r.status == "ok" and r.cached_tokens is not None]
    cached = {r.hash for r in ok if r.cached_tokens}
    fresh = {r.hash for r in ok if not r.cached_tokens}
    if not cached or not fresh:
        return None
    return {"kind": group.kind, "length": group.length, "level": group.level,
            "tag": group.tag, "cached": sum(bool(r.cached_tokens) for r in ok),
            "uncached": sum(not r.cached_tokens for r in ok), "differ": cached != fresh}


def group_rows(cell: Cell) -> list[dict[str, Any]]:
    rows = []
    for g in cell.groups:
        ok = [r for r in g.responses if r.status == "ok"]
        hashes = Counter(r.hash for r in ok)
        majority_hash, majority = hashes.most_common(1)[0] if hashes else (None, 0)
        cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
        rows.append({
            "kind": g.kind,
            "length": g.length,
            "level": g.level,
            "requests": len(g.responses),
            "ok": len(ok),
            "errors": len(g.responses) - len(ok),
            "distinct": len(hashes),
            "off_majority": len(ok) - majority,
            "distinct_token_sequences": len({tuple(r.token_ids) for r in ok}),
            "majority_hash": majority_hash,
            "max_cached_tokens": max(cached) if cached else None,
            "cache_split": cache_split(g),
        })
    return rows


def analyse_load(cell: Cell) -> dict[str, Any]:
    rows = group_rows(cell)
    control_failed = [{"kind": r["kind"], "length": r["length"], "level": r["level"]}
                      for r in rows if r["level"] == 1 and r["distinct"] > 1]
    drifting = [r for r in rows if r["level"] > 1 and r["distinct"] > 1]
    return {
        "load": cell.load,
        "launch": cell.launch,
        "groups": rows,
        "control_ok": not control_failed,
        "control_failed": control_failed,
        "drifting_groups": len(drifting),
        "first_drift": first_drift(drifting),
        "skipped": cell.skipped,
    }


def first_drift(drifting: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The shortest drifting length, at the lowest level it drifts at, per request kind."""
    if not drifting:
        return None
    length = min(r["length"] for r in drifting)
    at = [r for r in drifting if r["length"] == length]
    level = min(r["level"] for r in at)
    kinds = sorted({r["kind"] for r in at if r["level"] == level})
    return {"length": length, "level": level, "kinds": kinds}


def table(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """Length x level over every load: the most distinct results and the responses off
    the majority, summed over loads."""
    cells: dict[tuple[str, int, int], dict[str, int]] = {}
    for load in loads:
        for r in load["groups"]:
            entry = cells.setdefault((r["kind"], r["length"], r["level"]),
                                     {"distinct": 0, "off_majority": 0, "requests": 0,
                                      "errors": 0})
            entry["distinct"] = max(entry["distinct"], r["distinct"])
            entry["off_majority"] += r["off_majority"]
            entry["requests"] += r["requests"]
            entry["errors"] += r["errors"]
    kinds = [k for k in ("score", "generate") if any(key[0] == k for key in cells)]
    lengths = sorted({n for _, n, _ in cells})
    levels = sorted({c for _, _, c in cells})
    return {
        "kinds": kinds,
        "lengths": lengths,
        "levels": levels,
        "cells": [
            {"kind": k, "length": n, "level": c, **cells[(k, n, c)],
             # exact interval on the rate of responses off the majority
             "off_majority_ci95": stats.exact_ci(
                 cells[(k, n, c)]["off_majority"],
                 cells[(k, n, c)]["requests"] - cells[(k, n, c)]["errors"])}
            for k in kinds for n in lengths for c in levels if (k, n, c) in cells
        ],
    }


def across_loads(loads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kind and length: do the control (level 1) majority results agree between loads?"""
    out = []
    keys = sorted({(r["kind"], r["length"]) for load in loads for r in load["groups"]})
    for kind, length in keys:
        hashes = {load["load"]: r["majority_hash"] for load in loads for r in load["groups"]
                  if (r["kind"], r["length"]) == (kind, length) and r["level"] == 1}
        out.append({"kind": kind, "length": length, "loads": sorted(hashes),
                    "distinct": len(set(hashes.values()))})
    return out


def analyse_arm(cells: list[Cell]) -> dict[str, Any] | None:
    mine = sorted((c for c in cells if c.probe == "concurrency"), key=lambda c: c.load)
    if not mine:
        return None
    loads = [analyse_load(c) for c in mine]
    drifting = [load["first_drift"] for load in loads if load["first_drift"]]
    splits = [r["cache_split"] for load in loads for r in load["groups"] if r["cache_split"]]
    return {
        "loads": loads,
        "table": table(loads),
        "control_ok": all(load["control_ok"] for load in loads),
        "batch_composition": bool(drifting),
        "first_drift": min(drifting, key=lambda d: (d["length"], d["level"]))
        if drifting else None,
        "across_loads": across_loads(loads),
        "cache_splits": splits,
    }
