"""Drift analysis: across loads, within a load, between arms, and the named signature.

Everything here is a pure function of parsed evidence, so `servediff
rederive` on any machine gets the same numbers the run printed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import combinations
from typing import Any

from servediff.analysis import concurrency, generation, stats
from servediff.analysis.compare import Comparison, TextScore, compare
from servediff.bundle import Evidence
from servediff.evidence import Cell

SUMMARY_SCHEMA_VERSION = 1

SIGNATURES = {
    "bit-identical": "every per-token logprob identical across every load and repeat",
    "stable within threshold": "differences exist but none exceeds the plan's threshold",
    "across-load only": "stable within each load; moves between cold loads "
                        "(per-load kernel or autotune choice)",
    "within-load": "moves between repeats inside one load (batch composition, order, "
                   "non-deterministic kernels)",
    "not measured": "only one load and no repeat: nothing to compare",
    "across-load": "cold loads disagree (per-load kernel or autotune choice)",
    "batch-composition": "identical requests give different results when they share the "
                         "engine with others; alone they agree",
    "non-deterministic alone": "identical requests sent one at a time already disagree",
    "cache-dependent": "a result changes with whether its prefix came from the prefix cache "
                       "or was computed fresh",
}


def scores_of(cell: Cell) -> dict[str, TextScore]:
    return {
        r.tag: TextScore(r.sum_nll, r.token_ids, r.token_logprobs)
        for r in cell.records
        if r.status == "ok" and r.sum_nll is not None
    }


def perplexity(cell: Cell) -> float | None:
    ok = [r for r in cell.records if r.status == "ok" and r.sum_nll is not None]
    tokens = sum(r.n_scored for r in ok)
    if not tokens:
        return None
    return math.exp(math.fsum(r.sum_nll or 0.0 for r in ok) / tokens)


def _load_row(cell: Cell) -> dict[str, Any]:
    ok = [r for r in cell.records if r.status == "ok"]
    return {
        "load": cell.load,
        "launch": cell.launch,
        "texts": len(cell.records),
        "ok": len(ok),
        "invalid": sum(r.status == "invalid" for r in cell.records),
        "errors": sum(r.status == "error" for r in cell.records),
        "tokens_scored": sum(r.n_scored for r in ok),
        "sum_nll": math.fsum(r.sum_nll or 0.0 for r in ok),
        "perplexity": perplexity(cell),
    }


def signature(across: list[Comparison], within: list[Comparison],
              conc: dict[str, Any] | None = None,
              batches: list[dict[str, Any]] | None = None,
              gen: dict[str, Any] | None = None) -> str:
    """Every place drift was found, joined; or why nothing was."""
    findings = []
    gen_within = gen is not None and any(w["diverged"] for w in gen["within_load"])
    gen_across = gen is not None and any(a["diverged"] for a in gen["across_load"])
    moved_batches = [b for b in batches or [] if b["moved"]]
    if conc is not None and not conc["control_ok"]:
        findings.append("non-deterministic alone (concurrency-1 control failed)")
    if any(c.moved for c in within) or gen_within:
        findings.append("within-load")
    if moved_batches and not any(c.moved for c in within):
        # Plain repeats at the arm's own batch size are the control: they held still.
        sizes = ", ".join(str(s) for s in sorted({b["batch_size"] for b in moved_batches}))
        versus = f"scoring batch size {moved_batches[0]['arm_batch_size']} vs {sizes}"
        findings.append(f"batch-composition ({versus})" if within else
                        f"batch-composition ({versus}; no same-size repeat as control)")
    if conc is not None and conc["control_ok"] and conc["batch_composition"]:
        first = conc["first_drift"]
        what = " and ".join(KIND_NAMES[k] for k in first.get("kinds", ["generate"]))
        findings.append(f"batch-composition ({what} from {first['length']} tokens at "
                        f"concurrency {first['level']})")
    splits = [*(conc or {}).get("cache_splits", []), *(gen or {}).get("cache_splits", [])]
    differing = [x for x in splits if x["differ"]]
    if differing:
        findings.append(f"cache-dependent ({len(differing)} of {len(splits)} groups: responses "
                        "served from the prefix cache differ from those computed fresh)")
    generation_moved = conc is not None and any(
        g["distinct"] > 1 for g in conc["across_loads"])
    if any(c.moved for c in across) or generation_moved or gen_across:
        findings.append("across-load only" if not findings else "across-load")
    if findings:
        return " + ".join(findings)
    if not across and not within and conc is None and not batches and gen is None:
        return "not measured"
    if all(c.bit_identical for c in [*across, *within]) and \
            all(b["bit_identical"] for b in batches or []):
        return "bit-identical"
    return "stable within threshold"


def _pair(label: dict[str, Any], comp: Comparison) -> dict[str, Any]:
    return {**label, **comp.as_dict()}


def analyse_arm(cells: list[Cell], threshold: float) -> dict[str, Any]:
    score_cells = sorted((c for c in cells if c.probe == "score"), key=lambda c: c.load)
    repeats = [c for c in cells if c.probe == "repeat"]
    across = [
        (a, b, compare(scores_of(a), scores_of(b), threshold))
        for a, b in combinations(score_cells, 2)
    ]
    within = []
    skipped = []
    batches = []
    for cell in sorted((c for c in cells if c.probe == "batch"), key=lambda c: (c.load, c.repeat)):
        base = next((c for c in score_cells if c.load == cell.load), None)
        if base is not None and base.launch == cell.launch:
            sizes = sorted({r.batch_size for r in base.records})
            batches.append({"load": cell.load, "batch_size": cell.repeat,
                            "arm_batch_size": max(sizes) if sizes else None,
                            **compare(scores_of(base), scores_of(cell), threshold).as_dict()})
    for rep in sorted(repeats, key=lambda c: (c.load, c.repeat)):
        base = next((c for c in score_cells if c.load == rep.load), None)
        if base is None:
            continue
        if base.launch != rep.launch:
            # Measured by two different processes after a resumed load:
            # comparing them would call across-launch drift within-load.
            skipped.append({"load": rep.load, "repeat": rep.repeat,
                            "reason": "score and repeat come from different launches"})
            continue
        within.append((base, rep, compare(scores_of(base), scores_of(rep), threshold)))
    conc = concurrency.analyse_arm(cells)
    gen = generation.analyse_arm(cells)
    sig = signature([c for *_, c in across], [c for *_, c in within], conc, batches, gen)
    return {
        "loads": [_load_row(c) for c in score_cells],
        "across_load": [_pair({"load_a": a.load, "load_b": b.load}, c) for a, b, c in across],
        "within_load": [
            _pair({"load": a.load, "repeat": b.repeat}, c) for a, b, c in within
        ],
        "within_load_skipped": skipped,
        "batch_size": batches,
        "concurrency": conc,
        "generation": gen,
        "signature": sig,
        "signature_meaning": meaning(sig),
        "invalid_rows": sum(r.status == "invalid" for c in cells for r in c.records),
        "error_rows": sum(r.status == "error" for c in cells for r in c.records),
    }


STABLE = ("bit-identical", "stable within threshold")
KIND_NAMES = {"score": "scoring requests", "generate": "greedy generations"}


def cache_dependence(per_arm: dict[str, dict[str, Any]], cache_on: Mapping[str, bool | None]
                     ) -> None:
    """Name within-load drift of a cache-on arm cache-dependent when a cache-off arm of the
    same plan held still within its loads: the cache is the difference between them."""
    still = [arm for arm, on in cache_on.items()
             if on is False and "within-load" not in per_arm[arm]["signature"]
             and per_arm[arm]["within_load"]]
    for arm, on in cache_on.items():
        sig = per_arm[arm]["signature"]
        if on and "within-load" in sig and "cache-dependent" not in sig and still:
            per_arm[arm]["signature"] = (
                f"{sig} + cache-dependent (prefix cache on; `{still[0]}` with it off "
                "held still within its loads)")
            per_arm[arm]["signature_meaning"] = meaning(per_arm[arm]["signature"])


def meaning(sig: str) -> str:
    return "; ".join(SIGNATURES[part.split(" (")[0]] for part in sig.split(" + "))


def shift_signature(moved_count: int, sig_a: str, sig_b: str) -> str:
    if not moved_count:
        return "no arm shift"
    if sig_a in STABLE and sig_b in STABLE:
        return "arm shift"
    return "arms differ, and at least one arm also drifts by itself"


def _moved_across(cells: list[Cell], threshold: float) -> dict[str, bool]:
    """Per text: did it move between any two cold loads of this arm?"""
    scored = sorted((c for c in cells if c.probe == "score"), key=lambda c: c.load)
    out: dict[str, bool] = {}
    for x, y in combinations(scored, 2):
        comp = compare(scores_of(x), scores_of(y), threshold)
        for tag in set(scores_of(x)) & set(scores_of(y)):
            out[tag] = out.get(tag, False) or tag in comp.moved_tags
    return out


def arm_shifts(by_arm: Mapping[str, list[Cell]], threshold: float,
               signatures: Mapping[str, str]) -> list[dict[str, Any]]:
    """Each pair of arms compared on their first measured load's score cell."""
    firsts = {}
    for arm, cells in by_arm.items():
        scored = sorted((c for c in cells if c.probe == "score"), key=lambda c: c.load)
        if scored:
            firsts[arm] = scored[0]
    out = []
    for a, b in combinations(firsts, 2):
        comp = compare(scores_of(firsts[a]), scores_of(firsts[b]), threshold)
        # Paired on texts: which moved between cold loads under one arm only.
        moved_a, moved_b = _moved_across(by_arm[a], threshold), _moved_across(by_arm[b], threshold)
        common = set(moved_a) & set(moved_b)
        a_only = sum(moved_a[t] and not moved_b[t] for t in common)
        b_only = sum(moved_b[t] and not moved_a[t] for t in common)
        out.append(_pair({"arm_a": a, "arm_b": b, "load_a": firsts[a].load,
                          "load_b": firsts[b].load,
                          "signature": shift_signature(comp.moved, signatures[a], signatures[b]),
                          "reload_discordant": {"texts": len(common), "moved_in_a_only": a_only,
                                                "moved_in_b_only": b_only,
                                                "mcnemar_p": stats.mcnemar(a_only, b_only)}},
                         comp))
    return out


def summarize_drift(evidence: Evidence) -> dict[str, Any]:
    plan = evidence.lock["plan"]
    threshold = float(plan["thresholds"]["moved_abs_nll"])
    arms = list(evidence.lock["arm_order"])
    by_arm = cells_by_arm(evidence)
    per_arm = {arm: analyse_arm(by_arm[arm], threshold) for arm in arms}
    cache_on = {arm: prefix_cache_of(evidence, arm) for arm in arms}
    cache_dependence(per_arm, cache_on)
    for arm in arms:
        per_arm[arm]["prefix_cache"] = cache_on[arm]
    expected_loads = plan["loads_per_arm"]
    gaps = []
    for arm in arms:
        got = len(per_arm[arm]["loads"])
        if got < expected_loads:
            gaps.append(f"{arm}: {got} of {expected_loads} planned loads have a score cell")
    if plan.get("base_url"):
        gaps.append("across-load drift: an external endpoint; servediff cannot reload a "
                    "server it did not start, so cold reloads were not compared")
    elif expected_loads < 2:
        gaps.append("across-load drift: one load per arm, so cold reloads were not compared")
    if plan["probes"]["repeat"]["count"] == 0:
        gaps.append("within-load drift: no repeat probe was run")
    for rec in evidence.loads:
        for launch in rec.launches:
            if launch.first_request_cached_tokens:
                gaps.append(f"{rec.arm} load {rec.load}: the first request after the start "
                            f"found {launch.first_request_cached_tokens} cached prompt tokens; "
                            "this load was not cold")
    failed_launches = [
        {"arm": rec.arm, "load": rec.load, "attempt": launch.attempt, "error": launch.error,
         "died_before_stop": bool(launch.stop and launch.stop.died_before_stop)}
        for rec in evidence.loads for launch in rec.launches
        if launch.error or (launch.stop and launch.stop.died_before_stop)
    ]
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "plan_sha256": evidence.lock["sha256"],
        "engine": plan["engine"],
        "model": plan["model"],
        "threshold_abs_nll": threshold,
        "arms": per_arm,
        "arm_shifts": arm_shifts(by_arm, threshold,
                                 {arm: data["signature"] for arm, data in per_arm.items()}),
        "generation_arm_shifts": generation.across_arms(by_arm),
        "failed_launches": failed_launches,
        "cells": len(evidence.cells),
        "partial_cells": [
            {"arm": c.arm, "load": c.load, "probe": c.probe, "repeat": c.repeat,
             "launch": c.launch, "rows": len(c.records)}
            for c in evidence.partial
        ],
        "invalid_rows": sum(a["invalid_rows"] for a in per_arm.values()),
        "error_rows": sum(a["error_rows"] for a in per_arm.values()),
        "setup": setup(evidence),
        "detectable_rate": stats.detectable_rate(len(evidence.lock["corpus"]["texts"])),
        "gaps": gaps,
    }


def cells_by_arm(evidence: Evidence) -> dict[str, list[Cell]]:
    by_arm: dict[str, list[Cell]] = {arm: [] for arm in evidence.lock["arm_order"]}
    for cell in evidence.cells:
        by_arm.setdefault(cell.arm, []).append(cell)
    return by_arm


def prefix_cache_of(evidence: Evidence, arm: str) -> bool | None:
    """Whether the arm's launches served with a prefix cache (None: not recorded)."""
    states = {launch.prefix_cache for rec in evidence.loads if rec.arm == arm
              for launch in rec.launches if launch.seconds_to_ready is not None}
    return states.pop() if len(states) == 1 else None


def setup(evidence: Evidence) -> dict[str, Any]:
    """What was served and on what, as the evidence recorded it (for the report)."""
    plan = evidence.lock["plan"]
    launches = [(rec.arm, launch) for rec in evidence.loads for launch in rec.launches]
    arms = {}
    for arm in evidence.lock["arm_order"]:
        spec = plan["arms"][arm]
        mine = [launch for a, launch in launches if a == arm]
        ready = [launch.seconds_to_ready for launch in mine if launch.seconds_to_ready is not None]
        arms[arm] = {
            "args": spec["args"],
            "env": spec["env"],
            "options": mine[0].options if mine else spec["options"],
            "command": mine[0].command if mine else None,
            "launches": len(mine),
            "external": any(launch.external for launch in mine),
            "seconds_to_ready": ready,
            "capacity": next((launch.capacity for launch in mine if launch.capacity), {}),
            "cache_isolation": sorted({launch.cache_isolation for launch in mine
                                       if launch.cache_isolation}),
            "first_request_cached_tokens": [launch.first_request_cached_tokens
                                            for launch in mine],
        }
    versions = sorted({
        f"{k}={v}" for _, launch in launches
        for k, v in (launch.engine.get("version") or {}).items() if v is not None
    })
    weights = sorted({f"{k}={v}" for _, launch in launches
                      for k, v in launch.weights_sha256.items()})
    conditions = [c.conditions for c in evidence.cells]
    return {
        "corpus": {"name": evidence.lock["corpus"]["name"],
                   "texts": len(evidence.lock["corpus"]["texts"])},
        "prefix": plan["scoring"]["prefix"],
        "loads_per_arm": plan["loads_per_arm"],
        "cost_loads_per_arm": plan.get("cost_loads_per_arm"),
        "repeats": plan["probes"]["repeat"]["count"],
        "probes": plan["probes"],
        "context_lengths": sorted({int(launch.engine["max_model_len"]) for _, launch in launches
                                   if launch.engine.get("max_model_len")}),
        "arms": arms,
        "engine_versions": versions,
        "weights_sha256": weights,
        "devices": sorted({str(launch.engine.get("device_name") or launch.engine.get("device"))
                           for _, launch in launches if launch.engine}),
        "cpu": sorted({c.cpu_model for c in conditions}),
        "gpus": sorted({g["name"] for c in conditions for g in c.gpus}),
        "python": sorted({c.python for c in conditions}),
    }
