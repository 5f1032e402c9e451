"""The whole analysis of a run: drift, costs, what was not tested, and the verdict.

`summarize` is what `summary.json` holds and what `servediff rederive`
recomputes; it reads parsed evidence only.
"""

from __future__ import annotations

from typing import Any

from servediff.analysis import cost, verdict
from servediff.analysis.drift import cells_by_arm, summarize_drift
from servediff.bundle import Evidence

# Probes servediff defines; the ones a run did not measure are listed as not tested.
PROBES = {
    "concurrency": "identical requests at concurrency >= 2 (batch-composition drift)",
    "generate": "greedy generation hashed across repeats, loads and arms",
    "speed": "decode tok/s, TTFT, prefill tok/s with noise bands",
    "sweep": "prompt lengths up to the context length, survival per length",
    "prefix": "prefix-cache reuse of a long shared system prompt",
    "capacity": "KV pool size and max concurrency",
}


def untested(plan: dict[str, Any], drift: dict[str, Any], costs: dict[str, Any]
             ) -> dict[str, str]:
    """Every probe the run did not measure, with why."""
    out = {}
    probes = plan["probes"]
    for name, key in (("concurrency", "concurrency"), ("generate", "generation")):
        if not probes[name]["enabled"]:
            out[name] = f"{PROBES[name]}: disabled in the plan"
        elif not any(arm[key] for arm in drift.values()):
            out[name] = f"{PROBES[name]}: no measurement completed"
    for name in ("speed", "sweep", "prefix"):
        if not probes[name]["enabled"]:
            out[name] = f"{PROBES[name]}: disabled in the plan"
        elif plan.get("base_url"):
            out[name] = f"{PROBES[name]}: not run against an external endpoint"
        elif not any(arm[name if name != "sweep" else "survival"] for arm in costs.values()):
            out[name] = f"{PROBES[name]}: no measurement completed"
    if not any(arm["capacity"]["reported"] for arm in costs.values()):
        out["capacity"] = f"{PROBES['capacity']}: the engine reports none"
    return out


def gaps(costs: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    """Parts of the cost regime that were planned and not reached."""
    out = []
    for arm, c in costs.items():
        s = c["survival"]
        if s is not None and s["not_measured"]:
            out.append(f"{arm}: {len(s['not_measured'])} sweep point(s) not measured "
                       f"(e.g. {s['not_measured'][0][0]} tokens x {s['not_measured'][0][1]})")
        if s is not None:
            short = [p for p in s["points"] if p["achieved_ok"] is False]
            if short:
                out.append(f"{arm}: {len(short)} sweep point(s) whose achieved prompt tokens "
                           f"are off the nominal length by more than "
                           f"{plan['probes']['sweep']['tolerance']:.0%}")
        for skip in (c["speed"] or {}).get("skipped", []):
            out.append(f"{arm}: speed at {skip['length']} tokens: {skip['reason']}")
    return out


def summarize(evidence: Evidence) -> dict[str, Any]:
    plan = evidence.lock["plan"]
    arms = list(evidence.lock["arm_order"])
    summary = summarize_drift(evidence)
    costs = cost.summarize_costs(evidence, cells_by_arm(evidence))
    missing = untested(plan, summary["arms"], costs)
    summary["costs"] = costs
    summary["untested"] = missing
    summary["gaps"] = [*summary["gaps"], *gaps(costs, plan)]
    summary["verdict"] = verdict.verdict(plan, arms, summary["arms"], costs, missing)
    return summary
