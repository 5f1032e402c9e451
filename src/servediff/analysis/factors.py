"""Factors: which factor changes which property, and what to ship.

A plan's `[factors]` become arms (servediff.design): the full factorial up to three
factors, else a fraction of it (analysis.screening reads those). Two arms that differ in one factor
only are a contrast of that factor. For each property measured per arm (drift
in each regime, whether it starts, survival per level, KV capacity and slots,
start-up, speed per length, level and metric, and what each probe with a finding of
its own compares) a contrast says
whether the factor changed it, from the same comparisons the verdict makes
(a speed or start-up difference inside its noise band is no change). A factor
changes a property always (every contrast), only together with other factors
(an interaction: some contrasts), or never.

What to ship is, of the arms that meet the plan's criterion (`ship.require`:
no text moved across loads, within a load, under concurrency), the one with the
fewest severe costs against the baseline (did not start, died or failed on a
prompt, a tenth of the KV pool, or a cost a probe marks severe), then the fewest factors,
then the fewest other costs: a factor that the criterion does not need is kept
when the arm without it has more severe costs (the seed's case: deterministic
inference is reproducible on FlashInfer and on Triton, and only on FlashInfer
does it die on long prompts). Every factor the answer leaves
out is named with the costs it would have brought on top of it, and every factor
it keeps only for its costs with the costs of the arm without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from servediff.analysis import cost, effects, screening, verdict
from servediff.analysis.findings import (
    ArmCosts,
    ArmDrift,
    Attribution,
    CacheArmsDrift,
    CapacityClaim,
    Claim,
    ConcurrencyDrift,
    Contrast,
    DidNotStart,
    DriftKind,
    Effect,
    EffectEstimate,
    FactorArm,
    Factors,
    FailureClaim,
    LeftOut,
    ProbeFindingClaim,
    Property,
    RegimeDrift,
    Ship,
    SpeedClaim,
    StartupClaim,
)
from servediff.design import Design, aliases_of
from servediff.evidence import Cell
from servediff.plan import BASELINE, REGIMES, Plan, Regime, arm_name
from servediff.probes.base import ProbeFinding

DRIFT_KINDS: dict[Regime, tuple[DriftKind, ...]] = {
    "across loads": ("across-load",),
    "within a load": ("within-load", "non-deterministic alone", "cache-dependent"),
    "concurrency": ("batch-composition",),
}
TOPIC_ORDER = ("drift", "starts", "survival", "capacity", "startup", "speed", "probe")
# the findings of probes with an analysis of their own, by section (Summary.probe_findings)
Found = Mapping[str, ProbeFinding]


def regime_drift(drift: ArmDrift | None, regime: Regime) -> RegimeDrift:
    """An arm's drift in one regime, from its signature's findings."""
    if drift is None:
        return RegimeDrift(regime=regime, reproducible=None)
    gen, conc = drift.generation, drift.concurrency
    measured = {
        # a control compared across loads needs two of them (one load: a list of one)
        "across loads": bool(drift.across_load or (gen and gen.across_load)
                             or (conc and any(len(c.loads) > 1 for c in conc.across_loads))),
        "within a load": bool(drift.within_load or (gen and gen.within_load)
                              or (conc and conc.loads)),
        "concurrency": bool(drift.batch_size or (conc and conc.loads)),
    }[regime]
    if not measured:
        return RegimeDrift(regime=regime, reproducible=None)
    found = [f for f in drift.signature.findings if f.kind in DRIFT_KINDS[regime]]
    counts = [f.count for f in found if not isinstance(f, CacheArmsDrift)]
    totals = [f.of for f in found if not isinstance(f, CacheArmsDrift | ConcurrencyDrift)]
    return RegimeDrift(regime=regime, reproducible=not found,
                       moved=sum(counts) if found else 0,
                       of=max(totals) if totals else None)


def required(plan: Plan, drift: Mapping[str, ArmDrift]) -> tuple[list[Regime], list[Regime]]:
    """The criterion's regimes that some arm measured, and those none did (a probe off)."""
    seen = {r for arm in plan.factor_arms() for r in REGIMES
            if regime_drift(drift.get(arm), r).reproducible is not None}
    return ([r for r in plan.ship.require if r in seen],
            [r for r in plan.ship.require if r not in seen])


def factor_arms(plan: Plan, drift: Mapping[str, ArmDrift],
                refused: Mapping[str, DidNotStart]) -> list[FactorArm]:
    require, _ = required(plan, drift)
    out = []
    for arm, names in plan.factor_arms().items():
        started = arm not in refused and arm in drift
        regimes = [regime_drift(drift.get(arm) if started else None, r) for r in REGIMES]
        out.append(FactorArm(arm=arm, factors=names, started=started, drift=regimes,
                             meets=started and bool(require) and all(
                                 x.reproducible is True for x in regimes
                                 if x.regime in require)))
    return out


def _changed_kind(kind: str) -> bool | None:
    return True if kind in ("cost", "gain") else False if kind == "within noise" else None


def measured(arm: str, by_arm: Mapping[str, list[Cell]],
             refused: Mapping[str, DidNotStart]) -> bool:
    """Whether the arm gave anything to compare: a measured cell, or the engine's refusal."""
    return arm in refused or bool(by_arm.get(arm))


def contrast_properties(a: str, b: str, arms: Mapping[str, FactorArm],
                        costs: Mapping[str, ArmCosts], by_arm: Mapping[str, list[Cell]],
                        refused: Mapping[str, DidNotStart], found: Found
                        ) -> list[tuple[Property, bool | None, list[Claim]]]:
    """Each property of arms a (without the factor) and b (with it): changed or not
    (None: not measured on both), and the claims that say how. An arm with no measured
    cell that the engine did not refuse (its loads failed or never ran) measured none."""
    out: list[tuple[Property, bool | None, list[Claim]]] = []
    for ra, rb in zip(arms[a].drift, arms[b].drift, strict=True):
        both = ra.reproducible is not None and rb.reproducible is not None
        out.append((Property(topic="drift", regime=ra.regime),
                    ra.reproducible != rb.reproducible if both else None, []))
    if not (measured(a, by_arm, refused) and measured(b, by_arm, refused)):
        out.append((Property(topic="starts"), None, []))
        return out
    starts = verdict.refused_claims(a, b, refused)
    out.append((Property(topic="starts"), (a in refused) != (b in refused), starts))
    if a in refused or b in refused:
        return out
    comparison = cost.compare_arms({a: costs[a], b: costs[b]}, a, by_arm)[0]
    claims = verdict.cost_claims(comparison, costs)
    sa, sb = costs[a].survival, costs[b].survival
    for level in sorted({*(sa.levels if sa else []), *(sb.levels if sb else [])}):
        mine: list[Claim] = [c for c in claims
                             if isinstance(c, FailureClaim) and c.point.level == level]
        moved = [c for c in mine if c.kind in ("cost", "gain")]
        changed = True if moved else (False if sa and sb else None)
        out.append((Property(topic="survival", level=level), changed, moved or mine))
    ca, cb = costs[a].capacity, costs[b].capacity
    for what, va, vb in (("kv", ca.kv_tokens, cb.kv_tokens),
                         ("concurrency", ca.max_concurrency, cb.max_concurrency)):
        said = [c for c in claims if isinstance(c, CapacityClaim) and c.what == what]
        changed = None if va is None or vb is None else verdict.kv_differs(va, vb)
        out.append((Property(topic="capacity", what=what),  # type: ignore[arg-type]
                    changed, said))
    for c in claims:
        if isinstance(c, StartupClaim):
            out.append((Property(topic="startup"), _changed_kind(c.kind), [c]))
        elif isinstance(c, SpeedClaim):
            row = c.comparison
            out.append((Property(topic="speed", metric=row.metric, length=row.prompt_tokens,
                                 level=row.concurrency), _changed_kind(c.kind), [c]))
    probed = verdict.probe_claims(found, a, b)
    for section in found:
        its = [c for c in probed if c.probe == section]
        judged = [c.kind in ("cost", "gain") for c in its if c.compared]
        out.append((Property(topic="probe", probe=section),
                    any(judged) if judged else None, list[Claim](its)))
    return out


def order_key(p: Property) -> tuple[object, ...]:
    return (TOPIC_ORDER.index(p.topic), REGIMES.index(p.regime) if p.regime else -1,
            p.what or "", p.length or 0, p.level or 0, p.metric or "", p.probe or "")


def effect(contrasts: Sequence[Contrast], contexts: Sequence[set[str]]
           ) -> tuple[Effect, list[str]]:
    """always / interaction (with the factors present wherever it changed) / never."""
    seen = [(c.changed, ctx) for c, ctx in zip(contrasts, contexts, strict=True)
            if c.changed is not None]
    if not seen:
        return "not measured", []
    changed = [ctx for flag, ctx in seen if flag]
    if len(changed) == len(seen):
        return "always", []
    if not changed:
        return "never", []
    common = set.intersection(*changed)
    return "interaction", sorted(common)


def attribute(plan: Plan, arms: Sequence[FactorArm], costs: Mapping[str, ArmCosts],
              by_arm: Mapping[str, list[Cell]], refused: Mapping[str, DidNotStart],
              found: Found) -> list[Attribution]:
    by_set = {frozenset(a.factors): a.arm for a in arms}
    named = {a.arm: a for a in arms}
    out = []
    for factor in plan.factors:
        rows: dict[str, tuple[Property, list[Contrast], list[set[str]], list[Claim]]] = {}
        for arm in arms:
            if factor in arm.factors or (with_it := by_set.get(
                    frozenset([*arm.factors, factor]))) is None:
                continue
            for prop, changed, claims in contrast_properties(arm.arm, with_it, named, costs,
                                                             by_arm, refused, found):
                key = prop.model_dump_json()
                entry = rows.setdefault(key, (prop, [], [], []))
                entry[1].append(Contrast(without=arm.arm, with_factor=with_it,
                                         changed=changed))
                entry[2].append(set(arm.factors))
                if changed:
                    entry[3].extend(claims)
        for prop, contrasts, contexts, claims in sorted(rows.values(),
                                                        key=lambda r: order_key(r[0])):
            kind, together = effect(contrasts, contexts)
            out.append(Attribution(factor=factor, property=prop, effect=kind,
                                   together_with=together, contrasts=contrasts,
                                   claims=claims))
    return out


def pair_costs(a: str, b: str, costs: Mapping[str, ArmCosts], by_arm: Mapping[str, list[Cell]],
               refused: Mapping[str, DidNotStart], found: Found) -> list[Claim]:
    """The costs of arm b against arm a (nothing when they are one arm)."""
    if a == b:
        return []
    claims: list[Claim] = list(verdict.refused_claims(a, b, refused))
    if a not in refused and b not in refused:
        comparison = cost.compare_arms({a: costs[a], b: costs[b]}, a, by_arm)[0]
        claims += verdict.cost_claims(comparison, costs)
        claims += verdict.probe_claims(found, a, b)
    return [c for c in claims if c.kind == "cost"]


# Costs of what the server cannot do (start, hold a prompt, keep a tenth more of its KV
# pool, or what a probe marks so): they decide the answer before the number of factors
# does. A speed or start-up cost only breaks a tie after it, since the noise rule passes
# some by chance and a factor kept for one would make the answer follow the noise.
SEVERE = ("refused", "survival", "survival failure")


def severe(claim: Claim) -> bool:
    if isinstance(claim, ProbeFindingClaim):
        return claim.severe
    if isinstance(claim, CapacityClaim):
        a, b = claim.value_a, claim.value_b
        return a is not None and b is not None and b < 0.9 * a
    return claim.topic in SEVERE


def ship(plan: Plan, arms: Sequence[FactorArm], costs: Mapping[str, ArmCosts],
         by_arm: Mapping[str, list[Cell]], refused: Mapping[str, DidNotStart],
         not_tested: Iterable[str], unmeasured: list[Regime], found: Found) -> Ship:
    order = {a.arm: i for i, a in enumerate(arms)}
    by_set = {frozenset(a.factors): a.arm for a in arms}

    meeting = [a for a in arms if a.meets]
    # each arm's costs against the baseline, once: (severe ones, all of them)
    burden = {a.arm: (sum(map(severe, mine)), len(mine)) for a in meeting
              for mine in [pair_costs(BASELINE, a.arm, costs, by_arm, refused, found)]}
    if meeting:
        chosen = min(meeting, key=lambda a: (burden[a.arm][0], len(a.factors),
                                             burden[a.arm][1], order[a.arm]))
    else:
        def shortfall(a: FactorArm) -> tuple[int, int, int, int]:
            mine = [r for r in a.drift if r.regime in plan.ship.require
                    and r.regime not in unmeasured]
            return (sum(r.reproducible is not True for r in mine),
                    sum(r.moved or 0 for r in mine), len(a.factors), order[a.arm])
        chosen = min((a for a in arms if a.started), key=shortfall, default=arms[0])
    # an arm with nothing measured is as good as absent: its costs are not known
    by_set = {k: arm for k, arm in by_set.items() if measured(arm, by_arm, refused)}
    left = []
    for factor in plan.factors:
        if factor in chosen.factors:
            continue
        against = chosen.arm
        arm = by_set.get(frozenset([*chosen.factors, factor]))
        if arm is None:
            against, arm = BASELINE, by_set.get(frozenset([factor]))
        left.append(LeftOut(factor=factor, arm=arm, against=against if arm else None,
                            costs=pair_costs(against, arm, costs, by_arm, refused, found)
                            if arm else []))
    kept = []
    for factor in chosen.factors if chosen.meets else []:
        without = by_set.get(frozenset(chosen.factors) - {factor})
        if without in burden:  # that arm meets the criterion too
            mine = pair_costs(chosen.arm, without, costs, by_arm, refused, found)
            kept.append(LeftOut(factor=factor, arm=without, against=chosen.arm,
                                costs=sorted(mine, key=lambda c: not severe(c))))
    return Ship(require=list(plan.ship.require), unmeasured=unmeasured,
                threshold_abs_nll=plan.thresholds.moved_abs_nll,
                baseline=BASELINE, arm=chosen.arm, factors=chosen.factors,
                meets=chosen.meets,
                costs=pair_costs(BASELINE, chosen.arm, costs, by_arm, refused, found),
                left_out=left, kept=kept, not_tested=sorted(not_tested))


def design_effects(design: Design, costs: Mapping[str, ArmCosts]) -> list[EffectEstimate]:
    """Each factor's main effect on start-up and on every speed metric, over the design's
    own arms (not the confirmation's: it would unbalance them), one sample per load."""
    arms = {arm_name(row): row for row in design.rows}
    aliases = {f: aliases_of(design, f) for f in design.factors}
    measured = {a: costs[a] for a in arms if a in costs}
    out = effects.main_effects("seconds to ready", design.factors, arms, {
        a: c.startup.seconds_to_ready for a, c in measured.items()}, aliases)
    points = sorted({(e.prompt_tokens, e.concurrency) for c in measured.values() if c.speed
                     for e in c.speed.per_length})
    for length, level in points:
        for metric in cost.METRICS:
            samples = {a: cost.load_means(e.metric(metric)) for a, c in measured.items()
                       if c.speed for e in c.speed.per_length
                       if (e.prompt_tokens, e.concurrency) == (length, level)
                       and e.metric(metric).values}
            out += effects.main_effects(f"{metric} at {length} tokens x{level}",
                                        design.factors, arms, samples, aliases)
    return out


def analyse(plan: Plan, drift: Mapping[str, ArmDrift], costs: Mapping[str, ArmCosts],
            by_arm: Mapping[str, list[Cell]], refused: Mapping[str, DidNotStart],
            not_tested: Iterable[str], found: Found | None = None) -> Factors | None:
    """The factor analysis of a plan with [factors]; None without."""
    if not plan.factors:
        return None
    arms = factor_arms(plan, drift, refused)
    found = found or {}
    answer = ship(plan, arms, costs, by_arm, refused, not_tested, required(plan, drift)[1],
                  found)
    design = plan.made_design()
    finding = None
    if not design.full:
        named = {a.arm: a for a in arms}

        def changes(arm: str) -> list[tuple[Property, bool | None]]:
            return [(prop, changed) for prop, changed, _ in contrast_properties(
                BASELINE, arm, named, costs, by_arm, refused, found)]

        finding = screening.analyse(design, arms, changes).model_copy(
            update={"effects": design_effects(design, costs)})
        if plan.confirmation is not None:
            name = arm_name(plan.confirmation)
            arm = named.get(name)
            finding = finding.model_copy(update={
                "confirmation": name,
                "confirmed": arm.meets if arm is not None and arm.started else None})
        answer = answer.model_copy(update={"predicted": screening.predicted(
            finding, [r for r in answer.require if r not in answer.unmeasured],
            list(plan.factors))})
    return Factors(names=list(plan.factors), arms=arms,
                   attribution=attribute(plan, arms, costs, by_arm, refused, found),
                   ship=answer, design=finding)
