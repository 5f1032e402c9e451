"""Designs and what their arms can tell, without an engine (servediff.design and
analysis.screening)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from servediff.analysis.screening import explain
from servediff.design import DesignSpec, make

SIX = [f"f{i}" for i in range(6)]


@pytest.mark.parametrize("spec", [DesignSpec(kind="fractional", resolution=3),
                                  DesignSpec(kind="fractional", resolution=4),
                                  DesignSpec(kind="screening"),
                                  DesignSpec(kind="fractional", generators="a b c -ab ac bc")])
def test_every_design_measures_the_baseline_first_and_is_balanced(spec: DesignSpec):
    d = make(SIX, spec)
    assert d.rows[0] == []
    m = d.matrix()
    # each factor present in half the arms, and every two columns orthogonal
    assert np.all(m.sum(axis=0) == 0)
    assert np.all((m.T @ m)[~np.eye(6, dtype=bool)] == 0)
    assert len({tuple(r) for r in d.rows}) == len(d.rows)


def test_a_resolution_iii_fraction_aliases_main_effects_with_interactions():
    d = make(SIX, DesignSpec(kind="fractional", resolution=3))
    assert (len(d.rows), d.resolution) == (8, 3)
    assert all(len(w) >= 3 for w in d.defining)
    # every main effect is aliased with two-factor interactions, by name
    for f in SIX:
        group = next(g for g in d.aliases() if f in g)
        assert any(" x " in e and f not in e.split(" x ") for e in group)


def test_a_resolution_iv_fraction_keeps_main_effects_clear():
    d = make(SIX, DesignSpec(kind="fractional", resolution=4))
    assert (len(d.rows), d.resolution) == (16, 4)
    assert not any(f in g for g in d.aliases() for f in SIX)


def test_plackett_burman_aliases_partly_and_names_it():
    d = make([f"f{i}" for i in range(8)], DesignSpec(kind="screening"))
    assert len(d.rows) == 12 and d.aliases() == [] and d.resolution is None
    assert d.partial() and all(abs(r) < 1 for _, _, r in d.partial())


def arms_of(rows: list[list[str]]) -> dict[str, list[str]]:
    return {"+".join(r) or "baseline": r for r in rows}


def test_explain_finds_the_one_set_under_the_full_factorial():
    rows = [list(c) for n in range(4) for c in itertools.combinations("abc", n)]
    arms = arms_of(rows)
    holds = {a: {"a", "b"} <= set(r) for a, r in arms.items()}
    assert explain("abc", arms, holds) == ("explained", [["a", "b"]])
    assert explain("abc", arms, dict.fromkeys(arms, True)) == ("every arm", [])
    assert explain("abc", arms, dict.fromkeys(arms, False)) == ("no arm", [])
    assert explain("abc", arms, dict.fromkeys(arms)) == ("not measured", [])
    # a or c (a disjunction) is no set of factors present together
    either = {a: bool({"a", "c"} & set(r)) for a, r in arms.items()}
    assert explain("abc", arms, either) == ("unexplained", [])


def test_explain_names_a_larger_set_that_selects_the_same_arms():
    # c is present wherever a and b are: the arms cannot say whether c is needed too
    rows = [[], ["a", "b", "c"], ["a"], ["b"], ["c"]]
    arms = arms_of(rows)
    holds = {a: {"a", "b"} <= set(r) for a, r in arms.items()}
    kind, sets = explain("abc", arms, holds)
    assert kind == "cannot tell apart"
    assert sets == [["a", "b"], ["a", "c"], ["b", "c"], ["a", "b", "c"]]
