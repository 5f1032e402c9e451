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
from servediff.evidence import Cell


def group_rows(cell: Cell) -> list[dict[str, Any]]:
    rows = []
    for g in cell.groups:
        ok = [r for r in g.responses if r.status == "ok"]
        hashes = Counter(r.hash for r in ok)
        majority_hash, majority = hashes.most_common(1)[0] if hashes else (None, 0)
        cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
        rows.append({
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
        })
    return rows


def analyse_load(cell: Cell) -> dict[str, Any]:
    rows = group_rows(cell)
    control_failed = [(r["length"], r["level"]) for r in rows
                      if r["level"] == 1 and r["distinct"] > 1]
    drifting = sorted((r["length"], r["level"]) for r in rows
                      if r["level"] > 1 and r["distinct"] > 1)
    return {
        "load": cell.load,
        "launch": cell.launch,
        "groups": rows,
        "control_ok": not control_failed,
        "control_failed": [{"length": n, "level": c} for n, c in control_failed],
        "drifting_groups": len(drifting),
        "first_drift": ({"length": drifting[0][0], "level": min(c for n, c in drifting
                                                               if n == drifting[0][0])}
                        if drifting else None),
        "skipped": cell.skipped,
    }


def table(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """Length x level over every load: the most distinct results and the responses off
    the majority, summed over loads."""
    cells: dict[tuple[int, int], dict[str, int]] = {}
    for load in loads:
        for r in load["groups"]:
            entry = cells.setdefault((r["length"], r["level"]),
                                     {"distinct": 0, "off_majority": 0, "requests": 0,
                                      "errors": 0})
            entry["distinct"] = max(entry["distinct"], r["distinct"])
            entry["off_majority"] += r["off_majority"]
            entry["requests"] += r["requests"]
            entry["errors"] += r["errors"]
    lengths = sorted({n for n, _ in cells})
    levels = sorted({c for _, c in cells})
    return {
        "lengths": lengths,
        "levels": levels,
        "cells": [
            {"length": n, "level": c, **cells[(n, c)],
             # exact interval on the rate of responses off the majority
             "off_majority_ci95": stats.exact_ci(
                 cells[(n, c)]["off_majority"],
                 cells[(n, c)]["requests"] - cells[(n, c)]["errors"])}
            for n in lengths for c in levels if (n, c) in cells
        ],
    }


def across_loads(loads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per length: do the control (level 1) majority results agree between loads?"""
    out = []
    lengths = sorted({r["length"] for load in loads for r in load["groups"]})
    for length in lengths:
        hashes = {load["load"]: r["majority_hash"] for load in loads for r in load["groups"]
                  if r["length"] == length and r["level"] == 1}
        out.append({"length": length, "loads": sorted(hashes),
                    "distinct": len(set(hashes.values()))})
    return out


def analyse_arm(cells: list[Cell]) -> dict[str, Any] | None:
    mine = sorted((c for c in cells if c.probe == "concurrency"), key=lambda c: c.load)
    if not mine:
        return None
    loads = [analyse_load(c) for c in mine]
    drifting = [load["first_drift"] for load in loads if load["first_drift"]]
    return {
        "loads": loads,
        "table": table(loads),
        "control_ok": all(load["control_ok"] for load in loads),
        "batch_composition": bool(drifting),
        "first_drift": min(drifting, key=lambda d: (d["length"], d["level"]))
        if drifting else None,
        "generation_across_loads": across_loads(loads),
    }
