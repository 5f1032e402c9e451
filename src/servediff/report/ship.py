"""What to ship and which factor changes what, in words (terminal, report.md, packet).

Read from `Summary.factors` only; every number comes from the claims and the
drift per regime that the analysis stored.
"""

from __future__ import annotations

from servediff import probes
from servediff.analysis.findings import (
    Attribution,
    FactorArm,
    Factors,
    Property,
    RegimeDrift,
    Ship,
    Summary,
)
from servediff.probes.speed import in_flight
from servediff.report.words import (
    METRIC_NAMES,
    and_list,
    claim_text,
    untested_text,
)

REGIME_WORDS = {"across loads": "across cold loads", "within a load": "within a load",
                "concurrency": "under concurrency"}


def criterion_text(ship: Ship) -> str:
    regimes = [REGIME_WORDS[r] for r in ship.require if r not in ship.unmeasured]
    how = ("bit-identical" if ship.threshold_abs_nll == 0 else
           f"no text moved by more than {ship.threshold_abs_nll:g} nats")
    return f"{how} {and_list(regimes)}" if regimes else "no regime of the criterion was measured"


def regime_text(r: RegimeDrift) -> str:
    where = REGIME_WORDS[r.regime]
    if r.reproducible is None:
        return f"{where}: not measured"
    unit = "drifting groups" if r.regime == "concurrency" else "texts moved"
    count = f"{r.moved} of {r.of}" if r.of is not None else f"{r.moved}"
    return f"{where}: {count} {unit}" if not r.reproducible else f"{where}: identical"


def _arm(f: Factors, name: str | None) -> FactorArm | None:
    return next((a for a in f.arms if a.arm == name), None)


def ship_lines(summary: Summary) -> list[str]:
    """The answer first, then its costs, the factors left out and what was not tested."""
    f = summary.factors
    if f is None:
        return []
    ship = f.ship
    chosen = _arm(f, ship.arm)
    drift = "; ".join(regime_text(r) for r in chosen.drift) if chosen else ""
    answered = bool(set(ship.require) - set(ship.unmeasured))
    if not answered:
        lines = ["No answer on reproducibility: no regime of the criterion was measured "
                 f"(a probe off, or one load per arm). What each factor costs against "
                 f"`{ship.arm}`:"]
    elif ship.meets and not ship.factors:
        lines = [f"Ship the baseline: it is already {criterion_text(ship)} ({drift}); no "
                 "factor is needed for reproducibility here."]
    elif ship.meets:
        lines = [f"Ship `{ship.arm}`: the fewest factors ({', '.join(ship.factors)}) that "
                 f"are {criterion_text(ship)} ({drift})."]
    else:
        lines = [f"No arm meets the criterion ({criterion_text(ship)}). The closest is "
                 f"`{ship.arm}` ({drift})."]
    if ship.unmeasured:
        lines.append(f"Not measured, so not part of the criterion: "
                     f"{and_list([REGIME_WORDS[r] for r in ship.unmeasured])}.")
    if ship.factors:
        if ship.costs:
            lines.append(f"Its costs against `{ship.baseline}`:")
            lines += [f"- {claim_text(c)}" for c in ship.costs]
        else:
            lines.append(f"No cost of `{ship.arm}` against `{ship.baseline}` was observed "
                         "within the regime measured.")
    for left in ship.left_out:
        head = (f"`{left.factor}`: not needed for reproducibility here" if ship.meets
                else f"`{left.factor}`: left out" if answered else f"`{left.factor}`")
        if left.arm is None:
            lines.append(f"{head}; its costs were not measured (no arm of it here).")
        elif left.costs:
            lines.append(f"{head}; on top of `{left.against}` it would cost:")
            lines += [f"- {claim_text(c)}" for c in left.costs]
        else:
            lines.append(f"{head}; on top of `{left.against}` no cost was observed.")
    missing = [f"{name}: {untested_text(name, why)}" for name, why in summary.untested.items()]
    lines.append("Not tested: " + ("; ".join(missing) if missing else
                                   "nothing the probes know of was left out") + ".")
    return lines


def property_text(p: Property) -> str:
    if p.topic == "drift" and p.regime:
        return f"drift {REGIME_WORDS[p.regime]}"
    if p.topic == "speed" and p.metric:
        return f"{METRIC_NAMES[p.metric]} at {p.length:,} tokens, {in_flight(p.level or 1)}"
    if p.topic == "survival":
        return ("survival of single prompts" if (p.level or 1) == 1 else
                f"survival of {p.level} prompts at once")
    if p.topic == "capacity":
        return "KV capacity" if p.what == "kv" else "concurrent sequences"
    if p.topic == "probe" and p.probe:
        return probes.by_section(p.probe).title
    return {"prefix": "prefix reuse", "startup": "start-up to ready",
            "starts": "whether the engine starts"}[p.topic]


def effect_text(a: Attribution) -> str:
    if a.effect == "interaction":
        return ("only together with " + and_list([f"`{x}`" for x in a.together_with])
                if a.together_with else "in some combinations only")
    return {"always": "always", "never": "never (within the noise band)",
            "not measured": "not measured"}[a.effect]


def attribution_lines(summary: Summary) -> list[str]:
    """Per factor: what it changes (always or with another factor), then what it never
    changes, in one line."""
    f = summary.factors
    if f is None:
        return []
    lines = []
    for factor in f.names:
        mine = [a for a in f.attribution if a.factor == factor]
        changes = [a for a in mine if a.effect in ("always", "interaction")]
        never = [property_text(a.property) for a in mine if a.effect == "never"]
        lines.append(f"`{factor}` changes " + (
            "; ".join(f"{property_text(a.property)} ({effect_text(a)})" for a in changes)
            if changes else "nothing measured") + ".")
        if never:
            lines.append(f"`{factor}` never changes: {', '.join(never)}.")
    return lines
