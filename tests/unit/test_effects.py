"""Main effects with bands under a design: the arithmetic, and a fraction on the timed
fake engine, where one factor halves the speed and two change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import scipy.stats as sps

from servediff.analysis.effects import main_effects
from servediff.plan import Plan
from servediff.report.markdown import render
from tests.unit.test_adaptive import run_timed, timed_plan


def test_each_factor_s_effect_is_the_difference_of_its_arms_means_banded_by_the_loads():
    arms = {"baseline": [], "a": ["a"], "b": ["b"], "a+b": ["a", "b"]}
    samples = {"baseline": [10.0, 12.0], "a": [20.0, 22.0], "b": [10.0, 12.0],
               "a+b": [20.0, 22.0]}
    a, b = main_effects("x", ["a", "b"], arms, samples, {"a": ["b x c"]})
    # pooled variance 2 on 4 degrees of freedom; each side's mean over 2 arms of 2 loads:
    # variance 2 (1/2 + 1/2) / 4 twice = 1
    half = float(sps.t.ppf(0.975, 4))
    assert (a.factor, a.estimate, a.df, a.arms, a.loads) == ("a", 10.0, 4, [2, 2], [4, 4])
    assert a.band95 == pytest.approx([10 - half, 10 + half])
    assert a.aliases == ["b x c"] and b.aliases == []
    assert b.estimate == 0.0 and b.band95 == pytest.approx([-half, half])


def test_one_load_per_arm_gives_estimates_without_bands_and_a_constant_factor_none():
    arms = {"baseline": ["c"], "a": ["a", "c"], "b": ["b", "c"], "a+b": ["a", "b", "c"]}
    effects = main_effects("x", ["a", "b", "c"], arms, {
        "baseline": [1.0], "a": [3.0], "b": [1.0], "a+b": [3.0], "other": [100.0]})
    assert [(e.factor, e.estimate, e.band95) for e in effects] == [
        ("a", 2.0, None), ("b", 0.0, None)]


def test_a_fraction_s_effects_name_the_slow_factor_with_its_aliases_and_clear_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    data = timed_plan(tmp_path).model_dump(exclude={"arms"})
    plan = Plan.model_validate({
        **data, "adaptive": False,
        "factors": {"slow": {"args": ["--flag"]}, "inert1": {"env": {"I1": "1"}},
                    "inert2": {"env": {"I2": "1"}}},
        "design": {"kind": "fractional", "resolution": 3, "confirm": False}})
    summary = run_timed(tmp_path, monkeypatch, plan, slowdown=2.0)
    assert summary.factors is not None and summary.factors.design is not None
    effects = {(e.factor, e.what): e for e in summary.factors.design.effects}
    slow = effects["slow", "decode_tok_s at 64 tokens x1"]
    assert slow.arms == [2, 2] and slow.loads == [4, 4] and slow.band95 is not None
    assert slow.estimate < 0 and slow.band95[1] < 0
    assert slow.aliases == ["inert1 x inert2"]
    # the inert factors' effects are noise: far smaller than the slow one's (each band
    # holds zero 95 % of the time, so a seed may put one just off it)
    for factor in ("inert1", "inert2"):
        inert = effects[factor, "decode_tok_s at 64 tokens x1"]
        assert inert.band95 is not None and abs(inert.estimate) < abs(slow.estimate) / 10
    text = render(summary, "run")
    assert "Main effect of `slow` on decode_tok_s at 64 tokens x1: -" in text
    assert "aliased with `inert1 x inert2`, whose effect it is as much" in text
    clear = [e for e in effects.values()
             if e.band95 is not None and not e.band95[0] <= 0 <= e.band95[1]]
    assert text.count("Main effect of `") == len(clear)
    held = len(effects) - len(clear)
    assert f"Main effects on speed and start-up not shown: {held} whose 95 % band holds " \
           "zero." in text
