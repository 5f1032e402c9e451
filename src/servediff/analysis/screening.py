"""What a fractional or screening design's arms can tell: per property, the factor sets
that explain where it holds.

A design short of the full factorial has few pairs of arms that differ in one factor
only, so the contrasts of analysis.factors find little. Here each property is read per
arm instead: drift in a regime holds where the arm is reproducible in it; every other
property where the arm changed it against the baseline (the verdict's own comparisons,
noise bands included). A factor set S explains a property when "every factor of S is in
the arm" matches it in every measured arm. Every such set up to MAX_ORDER factors is
kept: one is an answer; several mean the design's arms cannot tell them apart, and the
report names them all instead of guessing; none means no set of up to MAX_ORDER factors
present together explains it. Under the full factorial at most one set can match.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

from servediff.analysis.findings import (
    DesignFinding,
    Explanation,
    FactorArm,
    Property,
)
from servediff.design import Design
from servediff.plan import BASELINE, REGIMES

# the largest set of factors present together that an explanation is sought among
MAX_ORDER = 3
# (property, whether it changed against the baseline) per arm, for one arm
Changes = Callable[[str], list[tuple[Property, bool | None]]]


def explain(factors: Sequence[str], arms: Mapping[str, Sequence[str]],
            holds: Mapping[str, bool | None]) -> tuple[str, list[list[str]]]:
    """(kind, sets) for a property that holds (True) or fails (False) in each arm, None
    where it was not measured."""
    measured = {a: v for a, v in holds.items() if v is not None}
    if not measured:
        return "not measured", []
    if all(measured.values()):
        return "every arm", []
    if not any(measured.values()):
        return "no arm", []
    # every set up to MAX_ORDER, not the smallest only: in a fraction, a set S and a
    # larger one can select the same arms (the extra factor present wherever S is), and
    # then the arms cannot say whether it is needed too
    sets = [list(s) for order in range(1, MAX_ORDER + 1)
            for s in itertools.combinations(factors, order)
            if all(set(s) <= set(arms[a]) for a, v in measured.items() if v)
            and not any(set(s) <= set(arms[a]) for a, v in measured.items() if not v)]
    if not sets:
        return "unexplained", []
    return ("explained" if len(sets) == 1 else "cannot tell apart"), sets


def explanation(prop: Property, factors: Sequence[str], arms: Mapping[str, Sequence[str]],
                holds: Mapping[str, bool | None]) -> Explanation:
    kind, sets = explain(factors, arms, holds)
    return Explanation(property=prop, kind=kind,  # type: ignore[arg-type]
                       holds=[a for a, v in holds.items() if v is True],
                       fails=[a for a, v in holds.items() if v is False],
                       unmeasured=[a for a, v in holds.items() if v is None], sets=sets)


def analyse(design: Design, arms: Sequence[FactorArm], changes: Changes) -> DesignFinding:
    """The design's finding: its shape, its aliases, and an explanation of each property
    (drift per regime from the arms' signatures; the rest from `changes`, each arm
    against the baseline)."""
    sets = {a.arm: a.factors for a in arms}
    out = []
    for i, regime in enumerate(REGIMES):
        holds = {a.arm: a.drift[i].reproducible if a.started else None for a in arms}
        out.append(explanation(Property(topic="drift", regime=regime), design.factors, sets,
                               holds))
    rows: dict[str, tuple[Property, dict[str, bool | None]]] = {}
    for a in arms:
        if a.arm == BASELINE:
            continue
        for prop, changed in changes(a.arm):
            if prop.topic == "drift":
                continue
            rows.setdefault(prop.model_dump_json(), (prop, {BASELINE: False}))[1][a.arm] = \
                changed
    for prop, holds in rows.values():
        out.append(explanation(prop, design.factors, sets,
                               {a.arm: holds.get(a.arm) for a in arms}))
    return DesignFinding(kind=design.kind,  # type: ignore[arg-type]
                         arms=len(design.rows), full_arms=2 ** len(design.factors),
                         resolution=design.resolution, defining=design.defining,
                         aliases=design.aliases(), partial=len(design.partial()),
                         explanations=out)


def predicted(finding: DesignFinding, require: Sequence[str], factors: Sequence[str]
              ) -> list[str] | None:
    """The factors the design says meet the criterion, in plan order: per required regime
    its explanation (nothing needed where every arm holds), together. None when a regime
    holds in no arm, is not explained, or its sets cannot be told apart."""
    needed: set[str] = set()
    for e in finding.explanations:
        if e.property.topic != "drift" or e.property.regime not in require:
            continue
        if e.kind in ("every arm", "not measured"):
            continue
        if e.kind != "explained":
            return None
        needed |= set(e.sets[0])
    return [f for f in factors if f in needed]
