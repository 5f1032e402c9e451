"""Analysis of the cost probes: speed with noise bands, survival, capacity, prefix reuse.

Pure functions of cost cells and load records. Noise bands are bootstrap
intervals with a fixed seed, so `servediff rederive` prints the same band the
run printed. A difference between two arms is a cost or a gain only when its
interval excludes zero; otherwise it is "within noise", stated with the band.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from servediff.analysis.stats import stable
from servediff.bundle import Evidence
from servediff.evidence import Cell, SweepPoint, cell_name

SEED = 20261130
RESAMPLES = 4000
MIN_REPLICATES = 3
# metric -> True when higher is better
METRICS = {"decode_tok_s": True, "prefill_tok_s": True, "ttft_s": False}


def _band(values: Sequence[float]) -> list[float] | None:
    """95 % bootstrap interval of the mean of `values`."""
    if len(values) < 2 or len(set(values)) == 1:
        return [float(values[0])] * 2 if values else None
    res = sps.bootstrap((np.asarray(values),), np.mean, n_resamples=RESAMPLES,
                        confidence_level=0.95, method="percentile",
                        rng=np.random.default_rng(SEED))
    return [stable(res.confidence_interval.low), stable(res.confidence_interval.high)]


def _diff_band(a: Sequence[float], b: Sequence[float]) -> list[float] | None:
    """95 % bootstrap interval of mean(b) - mean(a), resampling each arm on its own.

    None below three replicates per arm: no band is claimed from two numbers."""
    if len(a) < MIN_REPLICATES or len(b) < MIN_REPLICATES:
        return None
    res = sps.bootstrap((np.asarray(a), np.asarray(b)),
                        lambda x, y, axis=-1: np.mean(y, axis=axis) - np.mean(x, axis=axis),
                        n_resamples=RESAMPLES, confidence_level=0.95, method="percentile",
                        paired=False, vectorized=True, rng=np.random.default_rng(SEED))
    return [stable(res.confidence_interval.low), stable(res.confidence_interval.high)]


def _monotone(values: Sequence[float]) -> bool:
    """Strictly rising or falling over at least four replicates in time order."""
    if len(values) < 4:
        return False
    steps = [b - a for a, b in itertools.pairwise(values)]
    return all(s > 0 for s in steps) or all(s < 0 for s in steps)


def speed_arm(cells: Sequence[Cell]) -> dict[str, Any] | None:
    mine = sorted((c for c in cells if c.probe == "speed"), key=lambda c: c.started_at)
    if not mine:
        return None
    lengths = sorted({s.prompt_tokens for c in mine for s in c.speed})
    per_length = []
    for length in lengths:
        rows = [(c, s) for c in mine for s in c.speed
                if s.prompt_tokens == length and not s.warmup and s.status == "ok"]
        entry: dict[str, Any] = {
            "prompt_tokens": length, "replicates": len(rows),
            "errors": sum(s.status == "error" for c in mine for s in c.speed
                          if s.prompt_tokens == length),
            "cells": sorted({_name(c) for c, _ in rows}),
        }
        for metric in METRICS:
            values = [v for _, s in rows if (v := getattr(s, metric)) is not None]
            entry[metric] = {
                "values": values,
                "mean": statistics.fmean(values) if values else None,
                "band95": _band(values),
                "monotone_drift": _monotone(values),
            }
        per_length.append(entry)
    return {"per_length": per_length,
            "monotone_drift": [{"prompt_tokens": e["prompt_tokens"], "metric": m}
                               for e in per_length for m in METRICS
                               if e[m]["monotone_drift"]]}


def speed_compare(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Arm b against arm a, per prompt length and metric: cost, gain or within noise."""
    if a is None or b is None:
        return []
    out = []
    by_length = {e["prompt_tokens"]: e for e in a["per_length"]}
    for eb in b["per_length"]:
        ea = by_length.get(eb["prompt_tokens"])
        if ea is None:
            continue
        for metric, higher_better in METRICS.items():
            xa, xb = ea[metric]["values"], eb[metric]["values"]
            band = _diff_band(xa, xb)
            if band is None:
                verdict = "not enough replicates"
                diff = None
            else:
                diff = statistics.fmean(xb) - statistics.fmean(xa)
                if band[0] <= 0 <= band[1]:
                    verdict = "within noise"
                else:
                    verdict = "gain" if (diff > 0) == higher_better else "cost"
            mean_a = ea[metric]["mean"]
            out.append({
                "prompt_tokens": eb["prompt_tokens"], "metric": metric, "verdict": verdict,
                "mean_a": mean_a, "mean_b": eb[metric]["mean"], "difference": diff,
                "difference_band95": band,
                "relative": diff / mean_a if diff is not None and mean_a else None,
                "replicates": [len(xa), len(xb)],
                "cells": [*ea["cells"], *eb["cells"]],
            })
    return out


def _name(cell: Cell, folder: str = "cells") -> str:
    """The evidence file of a cell, relative to the run directory."""
    name = cell_name(cell.arm, cell.load, cell.probe, cell.repeat, cell.phase)
    return f"cells/{name}.json" if folder == "cells" else f"partial/{name}-progress.json"


def survival_arm(cells: Sequence[Cell], partial: Sequence[Cell]) -> dict[str, Any] | None:
    """The survival map of one arm from its sweep cell (or the sweep's progress so far)."""
    sweeps = [c for c in [*cells, *partial] if c.probe == "sweep"]
    if not sweeps:
        return None
    cell = max(sweeps, key=lambda c: len(c.sweep))
    context = cell.context_length
    complete = any(c.probe == "sweep" for c in cells)
    points = [_point(p, context) for p in cell.sweep]
    levels = sorted({p["level"] for p in points})
    largest = {}
    first_failure = {}
    for level in levels:
        mine = sorted((p for p in points if p["level"] == level), key=lambda p: p["length"])
        ok = [p["length"] for p in mine if p["outcome"] in ("ok", "slow")]
        largest[str(level)] = max(ok) if ok else None
        bad = next((p for p in mine if p["failure"]), None)
        first_failure[str(level)] = bad
    missing = [list(x) for x in cell.sweep_plan
               if tuple(x) not in {(p["length"], p["level"]) for p in points}]
    return {"context_length": context, "complete": complete, "points": points,
            "levels": levels, "lengths": sorted({p["length"] for p in points}),
            "largest_ok_length": largest, "first_failure": first_failure,
            "not_measured": missing,
            "cell": _name(cell, "cells" if complete else "partial"),
            "skipped": cell.skipped}


def _point(p: SweepPoint, context: int | None) -> dict[str, Any]:
    beyond = context is not None and p.length + 1 > context
    # A refusal of a prompt longer than the context is the server doing its job;
    # an error inside the context, a hang or a death anywhere is a failure.
    failure = p.outcome in ("hang", "timeout", "death") or (p.outcome == "error"
                                                            and not beyond)
    return {"length": p.length, "level": p.level, "outcome": p.outcome,
            "beyond_context": beyond, "failure": failure,
            "achieved_ok": p.achieved_ok, "achieved_prompt_tokens": p.achieved_prompt_tokens,
            "http_status": p.http_status, "error": p.error, "returncode": p.returncode,
            "signal": p.signal, "health_answered": p.health_answered,
            "seconds": p.seconds, "launch": p.launch}


def capacity_arm(evidence: Evidence, arm: str) -> dict[str, Any]:
    """KV pool and concurrency as the engine reported them, per launch that got ready."""
    seen = []
    for rec in evidence.loads:
        if rec.arm != arm:
            continue
        for launch in rec.launches:
            if launch.capacity:
                seen.append({"load": rec.load, "phase": rec.phase, "attempt": launch.attempt,
                             **launch.capacity})
    prefer = [c for c in seen if c["phase"] == "cost"] or seen
    kv = sorted({c["kv_tokens"] for c in prefer if c.get("kv_tokens") is not None})
    slots = sorted({c[k] for c in prefer for k in ("max_concurrency", "total_slots",
                                                   "max_running_requests", "max_num_seqs")
                    if c.get(k) is not None})
    return {"launches": seen, "kv_tokens": kv[0] if kv else None,
            "kv_tokens_varied": len(kv) > 1, "max_concurrency": slots[0] if slots else None,
            "reported": bool(seen)}


def prefix_arm(cells: Sequence[Cell]) -> dict[str, Any] | None:
    mine = sorted((c for c in cells if c.probe == "prefix"), key=lambda c: c.load)
    if not mine:
        return None
    loads: list[dict[str, Any]] = []
    for cell in mine:
        ok = [s for s in cell.prefix if s.status == "ok"]
        if not ok:
            loads.append({"load": cell.load, "ok": 0})
            continue
        first, later = ok[0], ok[1:]
        cached = [s.cached_tokens for s in later if s.cached_tokens is not None]
        loads.append({
            "load": cell.load, "ok": len(ok), "prompt_tokens": first.prompt_tokens,
            "first_ttft_s": first.ttft_s, "first_cached_tokens": first.cached_tokens,
            "later_ttft_s": statistics.median(s.ttft_s for s in later if s.ttft_s is not None)
            if later else None,
            "later_cached_tokens": min(cached) if cached else None,
            "cached_reported": bool(cached),
        })
    good = [x for x in loads if x.get("later_ttft_s") is not None]
    ratio = [x["first_ttft_s"] / x["later_ttft_s"] for x in good if x["later_ttft_s"]]
    cached = [x["later_cached_tokens"] for x in loads if x.get("later_cached_tokens") is not None]
    return {"loads": loads, "cells": [_name(c) for c in mine],
            "prompt_tokens": loads[0].get("prompt_tokens"),
            "later_cached_tokens": min(cached) if cached else None,
            "cached_reported": bool(cached),
            "first_over_later_ttft": statistics.median(ratio) if ratio else None,
            "later_ttft_s": statistics.median(x["later_ttft_s"] for x in good) if good else None}


def startup_arm(evidence: Evidence, arm: str) -> dict[str, Any]:
    seconds = [launch.seconds_to_ready for rec in evidence.loads if rec.arm == arm
               for launch in rec.launches if launch.seconds_to_ready is not None]
    return {"seconds_to_ready": seconds,
            "mean": statistics.fmean(seconds) if seconds else None,
            "band95": _band(seconds)}


def summarize_costs(evidence: Evidence, by_arm: Mapping[str, list[Cell]]) -> dict[str, Any]:
    arms = list(evidence.lock["arm_order"])
    partial = {arm: [c for c in evidence.partial if c.arm == arm] for arm in arms}
    out = {arm: {"speed": speed_arm(by_arm[arm]),
                 "survival": survival_arm(by_arm[arm], partial[arm]),
                 "capacity": capacity_arm(evidence, arm),
                 "prefix": prefix_arm(by_arm[arm]),
                 "startup": startup_arm(evidence, arm)} for arm in arms}
    return out
