"""What to ship and which factor changes what, in words (terminal, report.md, packet).

Read from `Summary.factors` only; every number comes from the claims and the
drift per regime that the analysis stored.
"""

from __future__ import annotations

from servediff import probes
from servediff.analysis.findings import (
    Attribution,
    DesignFinding,
    EffectEstimate,
    Explanation,
    FactorArm,
    Factors,
    Property,
    RegimeDrift,
    Ship,
    Summary,
)
from servediff.design import ROMAN
from servediff.digits import num3
from servediff.probes.speed import in_flight
from servediff.report.words import (
    METRIC_NAMES,
    and_list,
    claim_text,
    untested_text,
)

REGIME_WORDS = {"across loads": "across cold loads", "within a load": "within a load",
                # the regime is batch composition: the scoring batch and concurrent requests
                "concurrency": "across batch sizes and concurrency levels"}


def criterion_text(ship: Ship) -> str:
    regimes = [REGIME_WORDS[r] for r in ship.require if r not in ship.unmeasured]
    how = ("bit-identical" if ship.threshold_abs_nll == 0 else
           f"no text moved by more than {ship.threshold_abs_nll:g} nats")
    return f"{how} {and_list(regimes)}" if regimes else "no regime of the criterion was measured"


def regime_text(r: RegimeDrift) -> str:
    where = REGIME_WORDS[r.regime]
    if r.reproducible is None:
        return f"{where}: not measured"
    # batch pairs count moved texts, the concurrency grid drifting groups
    unit = "texts moved or groups drifting" if r.regime == "concurrency" else "texts moved"
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
    elif ship.meets and ship.kept:
        lines = [f"Ship `{ship.arm}`: of the arms that are {criterion_text(ship)}, the one "
                 f"with the fewest severe costs against `{ship.baseline}` ({drift}); an arm "
                 "of fewer factors meets it too, with more (below)."]
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
    for kept in ship.kept:
        head = (f"`{kept.factor}`: not needed for reproducibility here, kept for its costs; "
                f"without it `{kept.arm}`")
        if kept.costs:
            lines.append(f"{head} would cost against `{kept.against}`:")
            lines += [f"- {claim_text(c)}" for c in kept.costs]
        else:
            lines.append(f"{head} meets the criterion too, with more severe costs against "
                         f"`{ship.baseline}`.")
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
    if f.design is not None:
        lines.append(prediction_text(f, ship))
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
        return probes.by_section(p.probe).compares
    return {"startup": "start-up to ready", "starts": "whether the engine starts"}[p.topic]


def effect_text(a: Attribution) -> str:
    if a.effect == "interaction":
        return ("only together with " + and_list([f"`{x}`" for x in a.together_with])
                if a.together_with else "in some combinations only")
    return {"always": "always", "never": "never (within the noise band)",
            "not measured": "not measured"}[a.effect]


def prediction_text(f: Factors, ship: Ship) -> str:
    """What the design says meets the criterion, and whether its arm was measured."""
    if ship.predicted is None:
        return ("The design cannot say which factors meet the criterion: see what its arms "
                "can tell, below.")
    name = "+".join(ship.predicted) or ship.baseline
    arm = _arm(f, name)
    said = f"The design predicts that `{name}` meets the criterion"
    d = f.design
    if d is not None and d.confirmation == name:
        if d.confirmed is None:
            return f"{said}; its confirmation arm is not measured yet."
        return (f"{said}; its confirmation arm, measured with the plan's drift and cost "
                "loads, " + ("does: the answer above rests on it." if d.confirmed else
                             "does not: the design's prediction was wrong here."))
    if arm is None:
        return (f"{said}; it is not among the design's arms, so it is a prediction until "
                "a confirmation arm measures it.")
    return f"{said}; measured here, it " + ("does." if arm.meets else "does not.")


def set_text(names: list[str]) -> str:
    return (f"`{names[0]}`" if len(names) == 1
            else and_list([f"`{n}`" for n in names]) + " together")


def explanation_text(e: Explanation, arms: int) -> str | None:
    """One property across the design's arms, or None when nothing is to be said (a
    property no arm changed, or none measured)."""
    drift = e.property.topic == "drift"
    what = property_text(e.property)
    verb = "is gone" if drift else "changed against the baseline"
    if e.kind == "every arm":
        return f"{what}: gone in every arm." if drift else None
    if e.kind == "no arm":
        return f"{what}: in every arm; no factor removes it." if drift else None
    if e.kind == "explained":
        return f"{what} {verb} exactly in the arms with {set_text(e.sets[0])}."
    if e.kind == "cannot tell apart":
        return (f"{what} {verb} in the arms with "
                + " or with ".join(set_text(x) for x in e.sets)
                + f": these {arms} arms cannot tell them apart.")
    if e.kind == "unexplained":
        return (f"{what} {verb} in {and_list([f'`{a}`' for a in e.holds])}; no set of up to "
                "three factors present together explains it.")
    return None


def design_lines(d: DesignFinding) -> list[str]:
    """The design's shape, what it aliases, and what its arms explain."""
    shape = (f"resolution {ROMAN.get(d.resolution, str(d.resolution))}"
             if d.resolution else "no effect fully aliased")
    relation = ("; defining relation I = " + " = ".join(" x ".join(w) for w in d.defining)
                if d.defining else "")
    head = ("a fraction of the full factorial" if d.kind == "fractional"
            else "a Plackett-Burman screening design")
    lines = [f"The design: {head}, {d.arms} of {d.full_arms} arms, {shape}{relation}."]
    for group in d.aliases:
        lines.append(f"{' = '.join(f'`{e}`' for e in group)}: aliased, this design cannot "
                     "separate their effects; a fold-over or a confirmation arm does.")
    if d.partial:
        lines.append(f"{d.partial} pairs of a main effect and a two-factor interaction are "
                     "partly aliased (correlated, not equal, over these arms).")
    lines += [t for e in d.explanations if (t := explanation_text(e, d.arms))]
    return lines + effect_lines(d.effects)


def estimate_text(e: EffectEstimate) -> str:
    assert e.band95 is not None
    alias = (f"; aliased with {and_list([f'`{a}`' for a in e.aliases])}, whose effect it "
             "is as much" if e.aliases else "")
    return (f"`{e.factor}` on {e.what}: {num3(e.estimate)} "
            f"[{num3(e.band95[0])}, {num3(e.band95[1])}] (95 % band; the arms with it "
            f"minus those without, over {e.loads[0]} and {e.loads[1]} loads){alias}.")


def effect_lines(effects: list[EffectEstimate]) -> list[str]:
    """The main effects whose band leaves out zero, then how many hold it or have none."""
    clear = [e for e in effects if e.band95 and not e.band95[0] <= 0 <= e.band95[1]]
    lines = [f"Main effect of {estimate_text(e)}" for e in clear]
    held = sum(1 for e in effects if e.band95 and e.band95[0] <= 0 <= e.band95[1])
    unbanded = sum(1 for e in effects if not e.band95)
    if held or unbanded:
        lines.append(
            "Main effects on speed and start-up not shown: "
            + and_list([x for x in (f"{held} whose 95 % band holds zero" if held else "",
                                    f"{unbanded} without a band (every arm one load)"
                                    if unbanded else "") if x]) + ".")
    return lines


def attribution_lines(summary: Summary) -> list[str]:
    """Per factor: what it changes (always or with another factor), then what it never
    changes, in one line; under a design short of the full factorial, what its arms tell
    first."""
    f = summary.factors
    if f is None:
        return []
    lines = design_lines(f.design) if f.design else []
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
