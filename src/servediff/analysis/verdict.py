"""The verdict: claims per arm pair, each with its evidence and the regime it covers.

Every arm is compared with the first arm of the plan (the baseline). A claim
is one sentence, a kind (drift, cost, gain, within noise, survival, note),
pointers to the evidence files behind it and the regime it covers. A cost
is always named with its size and where it starts. When no cost was found,
the headline says "no cost observed within" the regime that was covered,
and every probe that was not run is listed as not tested next to it: the
verdict cannot call a flag free.
"""

from __future__ import annotations

from typing import Any

from servediff.analysis import cost

METRIC_NAMES = {"decode_tok_s": "decode tok/s", "prefill_tok_s": "prefill tok/s",
                "ttft_s": "TTFT (s)"}


def claim(kind: str, text: str, evidence: list[str], regime: str = "") -> dict[str, Any]:
    return {"kind": kind, "text": text, "evidence": evidence, "regime": regime}


def _n(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def drift_claims(arm: str, drift: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for pair in drift["across_load"]:
        out.append(claim(
            "drift" if pair["moved"] else "note",
            f"`{arm}` moved {pair['moved']} of {pair['compared']} texts between cold loads "
            f"{pair['load_a']} and {pair['load_b']}"
            + (f" (max |dNLL| {pair['max_abs_delta']:.3g})" if pair["moved"] else
               (" (bit-identical)" if pair["bit_identical"] else "")),
            [f"cells/{arm}-load{pair['load_a']}-score.json",
             f"cells/{arm}-load{pair['load_b']}-score.json"],
            f"{pair['compared']} texts, teacher-forced"))
    out.append(claim("note", f"`{arm}` drift signature: {drift['signature']}", [],
                     "drift probes run"))
    return out


def speed_claims(a: str, b: str, costs: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for row in cost.speed_compare(costs[a]["speed"], costs[b]["speed"]):
        name = METRIC_NAMES[row["metric"]]
        where = f"{name} at {row['prompt_tokens']} prompt tokens"
        if row["difference_band95"] is None:
            out.append(claim("note", f"{where}: not enough replicates for a noise band "
                             f"({row['replicates'][0]} and {row['replicates'][1]})",
                             row["cells"]))
            continue
        lo, hi = row["difference_band95"]
        rel = "" if row["relative"] is None else f" ({row['relative']:+.1%})"
        band = f"95 % band of the difference [{_n(lo)}, {_n(hi)}]"
        size = (f"`{b}` {_n(row['mean_b'])} vs `{a}` {_n(row['mean_a'])}{rel}")
        kind = {"within noise": "within noise", "cost": "cost", "gain": "gain"}[row["verdict"]]
        text = (f"{where}: {size}, within noise ({band})" if kind == "within noise"
                else f"{where}: {size}, a {kind} outside the noise ({band})")
        out.append(claim(kind, text, row["cells"],
                         f"{row['prompt_tokens']} prompt tokens, one request at a time, "
                         f"{row['replicates'][0]}+{row['replicates'][1]} replicates"))
    for arm in (a, b):
        for drift in (costs[arm]["speed"] or {}).get("monotone_drift", []):
            out.append(claim("note", f"`{arm}`: {METRIC_NAMES[drift['metric']]} at "
                             f"{drift['prompt_tokens']} tokens moved in one direction over "
                             "every replicate (thermal or cache artefact?)", []))
    return out


def capacity_claims(a: str, b: str, costs: dict[str, Any]) -> list[dict[str, Any]]:
    ca, cb = costs[a]["capacity"], costs[b]["capacity"]
    evidence = sorted({f"loads/{arm}-{'cost' if x['phase'] == 'cost' else 'load'}{x['load']}.json"
                       for arm, c in ((a, ca), (b, cb)) for x in c["launches"]})
    out = []
    ka, kb = ca["kv_tokens"], cb["kv_tokens"]
    if ka and kb:
        rel = kb / ka - 1
        text = f"KV pool: `{b}` {kb:,} vs `{a}` {ka:,} tokens ({rel:+.0%})"
        kind = "cost" if kb < ka else "gain" if kb > ka else "note"
        out.append(claim(kind, text if kind != "note" else text + ", the same", evidence,
                         "as the engine reported it at start-up"))
    elif ka or kb:
        out.append(claim("note", f"KV pool reported for one arm only ({a}: {ka}, {b}: {kb})",
                         evidence))
    ma, mb = ca["max_concurrency"], cb["max_concurrency"]
    if ma and mb and ma != mb:
        out.append(claim("cost" if mb < ma else "gain",
                         f"maximum concurrency: `{b}` {_n(mb)} vs `{a}` {_n(ma)} "
                         f"({mb / ma - 1:+.0%})", evidence, "as the engine reported it"))
    return out


def _failure_text(arm: str, p: dict[str, Any]) -> str:
    where = (f"the first {'prompt' if p['level'] == 1 else str(p['level']) + ' concurrent prompts'}"
             f" of {p['length']:,} tokens")
    if p["outcome"] == "death":
        how = p["signal"] or (f"exit code {p['returncode']}" if p["returncode"] is not None
                              else "exited")
        return f"`{arm}`: the server process died at {where} ({how})"
    if p["outcome"] == "hang":
        health = " while its health check still answered" if p["health_answered"] else ""
        return f"`{arm}`: requests hung (no answer, no work) at {where}{health}"
    if p["outcome"] == "timeout":
        return (f"`{arm}`: no answer at {where} within the bound, although the engine kept "
                "working")
    return f"`{arm}`: error response at {where} (HTTP {p['http_status']})"


FAILED = {"death": "the server died", "hang": "requests hung", "timeout": "requests timed out",
          "error": "an error response came"}


def survival_claims(a: str, b: str, costs: dict[str, Any]) -> list[dict[str, Any]]:
    sa, sb = costs[a]["survival"], costs[b]["survival"]
    out = []
    for arm, mine, other in ((b, sb, sa), (a, sa, sb)):
        if mine is None:
            continue
        ok_there = {(p["length"], p["level"]) for p in (other or {}).get("points", [])
                    if p["outcome"] == "ok"}
        for level, p in mine["first_failure"].items():
            if p is None:
                continue
            # A failure of the compared arm where the baseline held is a cost of that arm;
            # a failure of the baseline where the other held is the other arm's gain.
            if (p["length"], p["level"]) in ok_there or other is None:
                kind = "cost" if arm == b else "gain"
                subject = "" if kind == "cost" else f" (a gain for `{b}`, which held there)"
            else:
                kind, subject = "survival", " (both arms failed there)"
            out.append(claim(kind, _failure_text(arm, p) + subject, [mine["cell"]],
                             f"sweep level {level}"))
    for arm, s in ((a, sa), (b, sb)):
        if s is None:
            continue
        out.append(claim("survival", survival_text(arm, s), [s["cell"]],
                         f"sweep lengths {s['lengths'][0]:,}..{s['lengths'][-1]:,}"
                         if s["lengths"] else "sweep"))
    return out


def survival_text(arm: str, s: dict[str, Any]) -> str:
    """Where single prompts held, where they failed and how; what the sweep reached."""
    largest = s["largest_ok_length"].get("1")
    failure = s["first_failure"].get("1")
    context = s["context_length"]
    inside = [p["length"] for p in s["points"] if p["level"] == 1 and not p["beyond_context"]]
    reached = bool(context) and max(inside, default=0) >= context - 1
    levels = f"levels {', '.join(str(x) for x in s['levels'])}"
    if failure is not None:
        held = f"up to {largest:,} tokens" if largest else "no length"
        return (f"`{arm}` survived single prompts {held}; at {failure['length']:,} tokens "
                f"{FAILED[failure['outcome']]}; {levels}")
    if largest is None:
        return f"`{arm}`: no single prompt was measured; {levels}"
    if reached:
        tail = f"every length measured, up to the context length ({context:,})"
    else:
        tail = f"every length measured, up to {largest:,} tokens" + (
            f" (the sweep did not reach the context length, {context:,})" if context else "")
    slow = [p["length"] for p in s["points"] if p["outcome"] == "slow"]
    slowly = f"; answers came after the request timeout from {min(slow):,} tokens" \
        if slow else ""
    return f"`{arm}` survived {tail} as single prompts{slowly}; {levels}"


def prefix_claims(a: str, b: str, costs: dict[str, Any]) -> list[dict[str, Any]]:
    pa, pb = costs[a]["prefix"], costs[b]["prefix"]
    if pa is None or pb is None:
        return []
    evidence = [*pa["cells"], *pb["cells"]]
    tokens = pa["prompt_tokens"]
    regime = f"a shared prefix, {tokens} prompt tokens per request, one at a time"
    ca, cb = pa["later_cached_tokens"], pb["later_cached_tokens"]
    if ca is None and cb is None:
        return [claim("note", "prefix reuse: neither arm reports cached tokens; TTFT of "
                      f"repeated requests `{a}` {_n(pa['later_ttft_s'])} s vs `{b}` "
                      f"{_n(pb['later_ttft_s'])} s", evidence, regime)]
    ta, tb = pa["later_ttft_s"], pb["later_ttft_s"]
    ttft = (f"; TTFT of later requests {_n(tb)} s vs {_n(ta)} s"
            + (f" ({tb / ta:.1f}x)" if ta and tb else ""))
    if (ca or 0) > (cb or 0):
        return [claim("cost", f"prefix reuse lost: a repeated {tokens:,}-token prompt gets "
                      f"{cb or 0:,} cached tokens under `{b}` vs {ca:,} under `{a}`{ttft}",
                      evidence, regime)]
    if (cb or 0) > (ca or 0):
        return [claim("gain", f"prefix reuse: {cb:,} cached tokens under `{b}` vs "
                      f"{ca or 0:,} under `{a}`{ttft}", evidence, regime)]
    return [claim("note", f"prefix reuse: the same under both arms ({ca} cached tokens){ttft}",
                  evidence, regime)]


def startup_claims(a: str, b: str, costs: dict[str, Any]) -> list[dict[str, Any]]:
    xa = costs[a]["startup"]["seconds_to_ready"]
    xb = costs[b]["startup"]["seconds_to_ready"]
    band = cost._diff_band(xa, xb)
    if band is None or not xa or not xb:
        return []
    ma, mb = sum(xa) / len(xa), sum(xb) / len(xb)
    size = f"`{b}` {mb:.1f} s vs `{a}` {ma:.1f} s"
    if band[0] <= 0 <= band[1]:
        return [claim("within noise", f"start-up to ready: {size}, within noise "
                      f"(band [{band[0]:.1f}, {band[1]:.1f}] s)", [],
                      f"{len(xa)}+{len(xb)} starts")]
    kind = "cost" if mb > ma else "gain"
    return [claim(kind, f"start-up to ready: {size} ({mb / ma - 1:+.0%})", [],
                  f"{len(xa)}+{len(xb)} starts")]


def coverage(plan: dict[str, Any], costs: dict[str, Any]) -> str:
    """The regime the cost claims cover, in one line."""
    parts = []
    probes = plan["probes"]
    speed = [c["speed"] for c in costs.values() if c["speed"]]
    if speed:
        lengths = sorted({e["prompt_tokens"] for s in speed for e in s["per_length"]})
        parts.append(f"speed at {', '.join(str(n) for n in lengths)} prompt tokens with "
                     f"{probes['speed']['max_tokens']} output tokens, one request at a time")
    sweeps = [c["survival"] for c in costs.values() if c["survival"]]
    if sweeps:
        top = max((p["length"] for s in sweeps for p in s["points"]
                   if not p["beyond_context"]), default=0)
        levels = sorted({lv for s in sweeps for lv in s["levels"]})
        parts.append(f"prompts up to {top:,} tokens at concurrency "
                     f"{', '.join(str(x) for x in levels)}")
    if any(c["prefix"] for c in costs.values()):
        parts.append("a repeated shared prefix")
    if any(c["capacity"]["reported"] for c in costs.values()):
        parts.append("KV capacity as reported")
    if probes["concurrency"]["enabled"]:
        drift_levels = ", ".join(str(x) for x in probes["concurrency"]["levels"])
        parts.append(f"drift at concurrency {drift_levels}")
    return "; ".join(parts) if parts else "no cost probe"


def verdict(plan: dict[str, Any], arms: list[str], drift: dict[str, Any],
            costs: dict[str, Any], untested: dict[str, str]) -> dict[str, Any]:
    base = arms[0]
    regime = coverage(plan, costs)
    not_tested = sorted(untested)
    pairs = []
    for other in arms[1:]:
        claims = [*drift_claims(base, drift[base]), *drift_claims(other, drift[other]),
                  *speed_claims(base, other, costs), *capacity_claims(base, other, costs),
                  *survival_claims(base, other, costs), *prefix_claims(base, other, costs),
                  *startup_claims(base, other, costs)]
        found = [c for c in claims if c["kind"] == "cost"]
        if found:
            headline = (f"`{other}` vs `{base}`: {len(found)} cost(s) found: "
                        + "; ".join(c["text"] for c in found))
        else:
            headline = f"`{other}` vs `{base}`: no cost observed within {regime}"
        if not_tested:
            headline += f". Not tested: {', '.join(not_tested)}"
        pairs.append({"baseline": base, "arm": other, "headline": headline,
                      "costs": len(found), "claims": claims, "coverage": regime,
                      "not_tested": not_tested, "fix": _fix(base, other, drift, found)})
    return {"baseline": base, "pairs": pairs, "coverage": regime, "not_tested": not_tested}


def _fix(base: str, other: str, drift: dict[str, Any], found: list[dict[str, Any]]
         ) -> str | None:
    """If one arm drifts across loads and the other does not: that arm fixed it, at a cost."""
    moved = {arm: any(p["moved"] for p in drift[arm]["across_load"]) for arm in (base, other)}
    for fixed, broken in ((other, base), (base, other)):
        if moved[broken] and not moved[fixed] and drift[fixed]["across_load"]:
            costs = "; ".join(c["text"] for c in found) if found and fixed == other else None
            return (f"`{fixed}` stopped the reload drift that `{broken}` showed"
                    + (f", at these measured costs: {costs}" if costs else
                       ", with no cost observed within the regime covered" if fixed == other else
                       ""))
    return None
