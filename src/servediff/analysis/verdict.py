"""The verdict: claims per arm pair, each with its evidence and the regime it covers.

Each arm is compared with the baseline of its comparison (the first arm of
its group in `plan.comparisons`; by default the plan's first arm). A claim
is a kind (drift, cost, gain, within noise, survival, note), a topic with the
numbers behind it (the cost analysis's own comparison objects, never
recomputed here) and pointers to the evidence files. A cost always carries
its size and where it starts. When no cost was found, the report says "no
cost observed within" the regime that was covered, and lists every probe that
was not run next to it: the verdict cannot call a flag free.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from servediff import probes
from servediff.analysis.findings import (
    ArmCosts,
    ArmDrift,
    CapacityClaim,
    Claim,
    ClaimKind,
    CostComparison,
    Coverage,
    DidNotStart,
    DriftClaim,
    FailureClaim,
    Fix,
    Pair,
    ProbeFindingClaim,
    RefusedClaim,
    SignatureClaim,
    SpeedClaim,
    StartupClaim,
    Survival,
    SurvivalClaim,
    SweepPointView,
    TrendClaim,
    Verdict,
)
from servediff.bundle import Layout
from servediff.evidence import cell_name
from servediff.plan import Plan
from servediff.probes.base import ProbeFinding
from servediff.probes.concurrency import ConcurrencySettings
from servediff.probes.speed import SpeedSettings


def drift_claims(arm: str, drift: ArmDrift) -> list[Claim]:
    out: list[Claim] = [
        DriftClaim(kind="drift" if pair.moved else "note",
                   evidence=[Layout.cell_ref(cell_name(arm, pair.load_a, "score", 0)),
                             Layout.cell_ref(cell_name(arm, pair.load_b, "score", 0))],
                   arm=arm, load_a=pair.load_a, load_b=pair.load_b, moved=pair.moved,
                   compared=pair.compared, max_abs_delta=pair.max_abs_delta,
                   bit_identical=pair.bit_identical)
        for pair in drift.across_load]
    out.append(SignatureClaim(arm=arm, signature=drift.signature))
    return out


def speed_claims(comparison: CostComparison, costs: Mapping[str, ArmCosts]) -> list[Claim]:
    a, b = comparison.baseline, comparison.arm
    out: list[Claim] = []
    for row in comparison.speed:
        kind: ClaimKind = "note" if row.verdict == "not enough replicates" else row.verdict
        if row.busy or len(row.rooms) > 1:
            kind = "note"  # on a busy machine, or on two: never a plain cost or gain
        out.append(SpeedClaim(kind=kind, evidence=row.cells, baseline=a, arm=b, comparison=row))
    for arm in (a, b):
        speed = costs[arm].speed
        out += [TrendClaim(arm=arm, trend=t) for t in (speed.monotone_drift if speed else [])]
    return out


# A KV pool within this fraction of the baseline's is the same pool: an engine sizes it
# from the memory free at start, which moves by a fraction of a percent with the kernels'
# workspaces and between launches (0.4 % and 0.55 % on the H200, docs/validation), not
# what the server can hold. The same holds for the requests of the full context the pool
# holds at once (vLLM's maximum concurrency), which is the pool over the context.
KV_SAME_WITHIN = 0.01


def kv_differs(ka: int | float, kb: int | float) -> bool:
    """Whether two reported KV pools (or the requests they hold at once) differ by more
    than KV_SAME_WITHIN of the first."""
    return abs(kb - ka) > KV_SAME_WITHIN * ka


def capacity_claims(a: str, b: str, costs: Mapping[str, ArmCosts]) -> list[Claim]:
    ca, cb = costs[a].capacity, costs[b].capacity
    evidence = sorted({*ca.evidence, *cb.evidence})
    out: list[Claim] = []
    ka, kb = ca.kv_tokens, cb.kv_tokens
    if ka and kb:
        kind: ClaimKind = ("cost" if kb < ka else "gain") if kv_differs(ka, kb) else "note"
        out.append(CapacityClaim(kind=kind, evidence=evidence, what="kv", baseline=a, arm=b,
                                 value_a=ka, value_b=kb))
    elif ka or kb:
        out.append(CapacityClaim(kind="note", evidence=evidence, what="kv", baseline=a, arm=b,
                                 value_a=ka, value_b=kb))
    ma, mb = ca.max_concurrency, cb.max_concurrency
    if ma and mb and ma != mb:
        # the requests the pool holds at once: within KV_SAME_WITHIN, the same pool
        kind = ("cost" if mb < ma else "gain") if kv_differs(ma, mb) else "note"
        out.append(CapacityClaim(kind=kind, evidence=evidence, what="concurrency",
                                 baseline=a, arm=b, value_a=ma, value_b=mb))
    return out


def survival_claims(a: str, b: str, costs: Mapping[str, ArmCosts]) -> list[Claim]:
    sa, sb = costs[a].survival, costs[b].survival
    out: list[Claim] = []
    for arm, mine, other in ((b, sb, sa), (a, sa, sb)):
        if mine is None:
            continue
        ok_there = {(p.length, p.level) for p in (other.points if other else [])
                    if p.outcome in ("ok", "slow")}
        for p in mine.first_failure.values():
            if p is None:
                continue
            bound = mine.limit if p.level == 1 else None
            # A failure of the compared arm where the baseline held is a cost of that arm;
            # a failure of the baseline where the other held is the other arm's gain.
            if other is None and arm == a:
                # the compared arm has no sweep (it did not start, or did not run one):
                # the baseline's failure is a survival finding, not a gain of that arm
                out.append(FailureClaim(kind="survival", evidence=[mine.cell], arm=arm,
                                        point=p, both_failed=False, limit=bound))
            elif (p.length, p.level) in ok_there or other is None or _held_past(other, p):
                kind: ClaimKind = "cost" if arm == b else "gain"
                out.append(FailureClaim(kind=kind, evidence=[mine.cell], arm=arm, point=p,
                                        both_failed=False, gain_for=b if kind == "gain"
                                        else None, limit=bound))
            else:
                out.append(FailureClaim(kind="survival", evidence=[mine.cell], arm=arm,
                                        point=p, both_failed=True, limit=bound))
    for arm, s in ((a, sa), (b, sb)):
        if s is not None:
            out.append(survival_claim(arm, s))
    return out


def _held_past(other: Survival, p: SweepPointView) -> bool:
    """The other arm held at a longer prompt of p's level and failed nowhere up to p's
    length: it would have held at p (a length that only one arm's bisection sent)."""
    mine = [q for q in other.points if q.level == p.level]
    return (any(q.length > p.length and q.outcome in ("ok", "slow") for q in mine)
            and not any(q.length <= p.length and q.failure for q in mine))


def survival_claim(arm: str, s: Survival) -> SurvivalClaim:
    """Where single prompts held, where they failed and how; what the sweep reached."""
    inside = [p.length for p in s.points if p.level == 1 and not p.beyond_context]
    slow = [p.length for p in s.points if p.outcome == "slow"]
    return SurvivalClaim(
        evidence=[s.cell], arm=arm, largest_single=s.largest_ok_length.get("1"),
        failure=s.first_failure.get("1"), context_length=s.context_length,
        reached_context=bool(s.context_length)
        and max(inside, default=0) >= (s.context_length or 0) - 1,
        slow_from=min(slow) if slow else None, levels=s.levels, lengths=s.lengths,
        limit=s.limit)


def startup_claims(comparison: CostComparison) -> list[Claim]:
    c = comparison.startup
    if c is None:
        return []
    kind: ClaimKind = "note" if len(c.rooms) > 1 else c.verdict  # timed on two machines
    return [StartupClaim(kind=kind, baseline=comparison.baseline, arm=comparison.arm,
                         comparison=c)]


def coverage(plan: Plan, costs: Mapping[str, ArmCosts], found: Mapping[str, ProbeFinding]
             ) -> Coverage:
    """The regime the cost claims cover."""
    speed = [c.speed for c in costs.values() if c.speed]
    sweeps = [c.survival for c in costs.values() if c.survival]
    grid = plan.probes.get(ConcurrencySettings)
    return Coverage(
        speed_lengths=sorted({e.prompt_tokens for s in speed for e in s.per_length}),
        speed_max_tokens=plan.probes.get(SpeedSettings).max_tokens if speed else None,
        speed_levels=sorted({e.concurrency for s in speed for e in s.per_length}) or [1],
        sweep_top=max((p.length for s in sweeps for p in s.points if not p.beyond_context),
                      default=0) if sweeps else None,
        sweep_levels=sorted({lv for s in sweeps for lv in s.levels}),
        probes=[section for section in found if probes.by_section(section).coverage],
        capacity=any(c.capacity.reported for c in costs.values()),
        drift_levels=grid.levels if grid.enabled else [])


def refused_claims(base: str, other: str, refused: Mapping[str, DidNotStart]) -> list[Claim]:
    """An arm the engine would not start: a cost of the compared arm where the baseline
    started, a gain of it where only the baseline did not, a note where neither did."""
    out: list[Claim] = []
    for arm in (other, base):
        if arm not in refused:
            continue
        r = refused[arm]
        kind: ClaimKind = ("note" if base in refused and other in refused else
                           "cost" if arm == other else "gain")
        out.append(RefusedClaim(kind=kind, evidence=r.evidence, arm=arm, message=r.message,
                                launches=r.launches))
    return out


def cost_claims(comparison: CostComparison, costs: Mapping[str, ArmCosts]) -> list[Claim]:
    """The cost and survival claims of one pair of arms: speed, capacity, survival,
    start-up."""
    base, other = comparison.baseline, comparison.arm
    return [*speed_claims(comparison, costs), *capacity_claims(base, other, costs),
            *survival_claims(base, other, costs), *startup_claims(comparison)]


def probe_claims(found: Mapping[str, ProbeFinding], base: str, other: str
                 ) -> list[ProbeFindingClaim]:
    """What each probe with a finding of its own says of `other` against `base`."""
    return [ProbeFindingClaim(kind=c.kind, evidence=c.evidence, probe=section, baseline=base,
                              arm=other, text=c.text, regime=c.regime, severe=c.severe,
                              compared=c.compared)
            for section, finding in found.items()
            for c in probes.by_section(section).compare(finding, base, other)]


def verdict(plan: Plan, arms: list[str], drift: Mapping[str, ArmDrift],
            costs: Mapping[str, ArmCosts], comparisons: list[CostComparison],
            untested: Mapping[str, object],
            refused: Mapping[str, DidNotStart] | None = None,
            found: Mapping[str, ProbeFinding] | None = None,
            measured: Set[str] | None = None) -> Verdict:
    """Claims per pair: each comparison's arm against its baseline (the first arm of its
    group, plan.comparisons; the verdict's baseline is the first group's). `found`: the
    findings of probes with an analysis of their own, by section; `measured`: the arms
    with a measured cell (None: every arm)."""
    regime = coverage(plan, costs, found or {})
    not_tested = sorted(untested)
    pairs = []
    for comparison in comparisons:
        base, other = comparison.baseline, comparison.arm
        claims = [*refused_claims(base, other, refused or {}),
                  *drift_claims(base, drift[base]), *drift_claims(other, drift[other]),
                  *cost_claims(comparison, costs), *probe_claims(found or {}, base, other)]
        unmeasured = [a for a in (base, other) if measured is not None
                      and a not in measured and a not in (refused or {})]
        pairs.append(Pair(baseline=base, arm=other, costs=sum(c.kind == "cost" for c in claims),
                          claims=claims, coverage=regime, not_tested=not_tested,
                          fix=_fix(base, other, drift), unmeasured=unmeasured))
    return Verdict(baseline=arms[0], pairs=pairs, coverage=regime, not_tested=not_tested)


def _fix(base: str, other: str, drift: Mapping[str, ArmDrift]) -> Fix | None:
    """If one arm drifts across loads and the other does not: that arm fixed it."""
    moved = {arm: any(p.moved for p in drift[arm].across_load) for arm in (base, other)}
    for fixed, broken in ((other, base), (base, other)):
        if moved[broken] and not moved[fixed] and drift[fixed].across_load:
            return Fix(fixed=fixed, broken=broken)
    return None
