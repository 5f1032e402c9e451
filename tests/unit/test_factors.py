"""Factors, attribution and What to ship, on the in-process fake engine.

The case servediff was built for, reproduced: one flag (`autotune_off`) stops
the drift between cold loads and costs nothing; the other (`deterministic`)
changes no drift, kills the server above a prompt length, cuts the KV pool and
loses prefix reuse. The answer must be "ship autotune_off", with
`deterministic` named as not needed and its three costs. The fake engine's
behaviour is a function of its launch command, so each arm the factors make
gets the engine its flags describe.
"""

from __future__ import annotations

import io
import itertools
import time
import types
from pathlib import Path

import pytest
from rich.console import Console

from servediff import sequential
from servediff.analysis.findings import FailureClaim, Summary
from servediff.analysis.summary import summarize
from servediff.bundle import read_confirmation, read_evidence, read_lock, write_lock
from servediff.design import ROMAN
from servediff.engines import registry
from servediff.errors import PlanError
from servediff.plan import Plan, lock, resolve_plan
from servediff.report import ship as ship_words
from servediff.report.table import fmt_nll, run_view
from servediff.runner import Runner, SilentObserver
from tests.claims import claim_topic
from tests.engines import fake
from tests.engines.fake import FakeEngine, FakeLauncher
from tests.unit.test_runner import TEXTS, model_folder

DIES_ABOVE = 1500



def factor_plan(tmp_path: Path, **extra: object) -> Plan:
    body = {"engine": "fake", "model": str(model_folder(tmp_path)), "loads_per_arm": 2,
            "cost_loads_per_arm": 1,
            # no quiet-box gate: the machine that runs the tests is not ours to keep quiet
            # (with it, each cost load looked for 3 s, and waited up to 300 s on a busy one)
            "quiet": {"gate_cost": False},
            "factors": {"autotune_off": {"args": ["--autotune-off"]},
                        "deterministic": {"args": ["--deterministic"]}},
            "probes": {"repeat": {"count": 1},
                       "concurrency": {"lengths": [64], "levels": [1, 2], "requests": 3,
                                       "max_tokens": 2},
                       "generate": {"texts": 2, "max_tokens": 3, "repeats": 2},
                       "speed": {"enabled": False},
                       "prefix": {"prefix_tokens": 256, "requests": 3},
                       "sweep": {"levels": [1]}}, **extra}
    return Plan.model_validate(body)


def the_case(argv: list[str], launch: int) -> FakeEngine:
    """--autotune-off: the same kernels every load; --deterministic: no drift change, dies
    above DIES_ABOVE prompt tokens, a third of the KV pool, no prefix cache."""
    deterministic = "--deterministic" in argv
    return FakeEngine(load_offset=0.0 if "--autotune-off" in argv else 1e-4 * (launch + 1),
                      dies_above=DIES_ABOVE if deterministic else None,
                      kv_tokens=93_574 if deterministic else 324_186,
                      prefix_cache=not deterministic)


def both_needed(argv: list[str], launch: int) -> FakeEngine:
    """The drift stops only with both flags."""
    fixed = "--autotune-off" in argv and "--deterministic" in argv
    return FakeEngine(load_offset=0.0 if fixed else 1e-4 * (launch + 1),
                      kv_tokens=324_186, prefix_cache=True)


class Clock:
    """A monotonic clock that advances one second per reading: every start takes the
    same number of readings, so start-up is equal across arms, not wall-clock noise."""

    def __init__(self) -> None:
        self.now = itertools.count()

    def monotonic(self) -> float:
        return float(next(self.now))


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: Plan, make) -> Summary:
    monkeypatch.setitem(registry.ENGINES, "fake", fake.ENTRY)
    clock = Clock()
    monkeypatch.setattr("servediff.launch.time", types.SimpleNamespace(
        monotonic=clock.monotonic, time=time.time, sleep=time.sleep))
    launcher = FakeLauncher(make=make)
    root = tmp_path / "run"
    sequential.run(Runner(plan, TEXTS, root, tmp_path, SilentObserver(),
                            launcher=launcher, clients=launcher.client))
    return summarize(read_evidence(root))


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.ENGINES, "fake", fake.ENTRY)


def test_two_factors_make_the_full_factorial_named_by_their_factors(tmp_path: Path,
                                                                    fake_engine: None):
    plan = factor_plan(tmp_path)
    assert list(plan.arms) == ["baseline", "autotune_off", "deterministic",
                               "autotune_off+deterministic"]
    assert plan.arms["autotune_off+deterministic"].args == ["--autotune-off",
                                                            "--deterministic"]
    # the lock records the arms; read back, the plan is the same run
    locked = lock(plan, TEXTS)
    assert list(locked.canonical()["plan"]["arms"]) == list(plan.arms)
    again = Plan.model_validate(locked.canonical()["plan"])
    assert lock(again, TEXTS).sha256 == locked.sha256


def test_factors_out_of_alphabetical_order_survive_the_lock_file(tmp_path: Path,
                                                                 fake_engine: None):
    # the lock file sorts its keys: the factors' own order, which names the arms
    # (serial+eager, never eager+serial), is kept beside it, as the arms' order is
    plan = factor_plan(tmp_path, factors={"serial": {"options": {"max_batch": 1}},
                                          "eager": {"options": {"attn": "eager"}}})
    assert list(plan.arms) == ["baseline", "serial", "eager", "serial+eager"]
    locked = lock(plan, TEXTS)
    write_lock(tmp_path, locked)
    again = read_lock(tmp_path)
    assert list(again.plan.factors) == ["serial", "eager"]
    assert list(again.plan.arms) == list(plan.arms) and again.sha256 == locked.sha256
    write_lock(tmp_path, lock(plan, TEXTS))  # the same run: accepted


def test_more_than_three_factors_make_a_half_fraction_of_resolution_iv(tmp_path: Path,
                                                                       fake_engine: None):
    # four factors: 2^(4-1) = 8 arms, defined by f0 x f1 x f2 x f3, the baseline among them,
    # every main effect clear of two-factor interactions, which alias in pairs
    factors = {f"f{i}": {"args": [f"--f{i}"]} for i in range(4)}
    plan = factor_plan(tmp_path, factors=factors)
    assert list(plan.arms) == ["baseline", "f0+f1", "f0+f2", "f0+f3", "f1+f2", "f1+f3",
                               "f2+f3", "f0+f1+f2+f3"]
    made = plan.made_design()
    assert (made.kind, made.resolution, made.defining) == ("fractional", 4,
                                                           [["f0", "f1", "f2", "f3"]])
    assert sorted(map(sorted, made.aliases())) == [
        ["f0 x f1", "f2 x f3"], ["f0 x f2", "f1 x f3"], ["f0 x f3", "f1 x f2"]]


@pytest.mark.parametrize(("factors", "expected"), [
    ({"a": {}}, "factors.a: Value error, a factor must change something"),
    ({"a": {"env": {"X": "1"}}, "b": {"env": {"X": "2"}}},
     "factors a and b set env.X differently"),
    ({"baseline": {"args": ["-x"]}}, "factor name 'baseline' must be"),
])
def test_bad_factors_name_what_is_wrong(tmp_path: Path, fake_engine: None,
                                        factors: dict, expected: str):
    raw = {"engine": "fake", "model": "smollm2", "factors": factors}
    with pytest.raises(PlanError) as info:
        resolve_plan(raw, "p.toml", tmp_path)
    assert expected.split("Value error, ")[-1] in str(info.value)
    assert "Traceback" not in str(info.value)


SIX = {n: {"env": {n.upper(): "1"}} for n in "abcdef"}


@pytest.mark.parametrize(("design", "expected"), [
    ({"kind": "screening", "resolution": 4},
     'p.toml: design: resolution and generators belong to kind = "fractional"'),
    ({"kind": "fractional", "generators": "a b c"},
     "p.toml: design.generators: 3 words for 6 factors; give one word per factor, in plan "
     "order (a b c d e f)"),
    ({"kind": "fractional", "generators": "a b c d e xy"},
     "p.toml: design.generators: use the letters a b c d e f"),
    ({"kind": "fractional", "generators": "a b c d e ab", "resolution": 3},
     "give resolution or generators, not both"),
    ({"kind": "fractional", "resolution": 5, "extra": 1}, "design.extra"),
])
def test_bad_designs_name_the_field(tmp_path: Path, fake_engine: None, design: dict,
                                    expected: str):
    raw = {"engine": "fake", "model": "smollm2", "factors": SIX, "design": design}
    with pytest.raises(PlanError) as info:
        resolve_plan(raw, "p.toml", tmp_path)
    assert expected in str(info.value)
    assert "Traceback" not in str(info.value)


@pytest.mark.parametrize(("design", "arms", "resolution"), [
    ({"kind": "fractional", "resolution": 3}, 8, 3),
    ({}, 16, 4),  # past three factors the default: resolution IV
    ({"kind": "fractional", "resolution": 5}, 32, 6),
    ({"kind": "screening"}, 8, 3),
    ({"kind": "fractional", "generators": "a b c ab ac bc"}, 8, 3),
])
def test_six_factors_take_the_arms_of_their_design_and_the_baseline_first(
        tmp_path: Path, fake_engine: None, design: dict, arms: int, resolution: int):
    from servediff.estimate import design_text
    from servediff.probes import protocol_size

    plan, corpus = resolve_plan({"engine": "fake", "model": "smollm2", "factors": SIX,
                                 "design": design}, "p.toml", tmp_path)
    made = plan.made_design()
    assert len(plan.arms) == arms == len({frozenset(a.factors) for a in plan.arms.values()})
    assert next(iter(plan.arms)) == "baseline" and made.resolution == resolution
    size = protocol_size(plan, corpus)
    assert design_text(plan, size) == (
        f"design: {made.kind} ({'resolution ' + ROMAN[resolution]}), {arms} of 64 factor "
        f"arms: {size.loads} cold loads; the full factorial would take "
        f"{size.loads // arms * 64}")


def test_the_case_ship_autotune_off_deterministic_is_not_needed_and_costs_three_things(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    summary = run(tmp_path, monkeypatch, factor_plan(tmp_path), the_case)
    assert summary.factors is not None
    arms = {a.arm: a for a in summary.factors.arms}
    across = {arm: a.drift[0] for arm, a in arms.items()}
    assert across["baseline"].reproducible is False and across["baseline"].moved == 4
    assert across["deterministic"].reproducible is False
    assert across["autotune_off"].reproducible is True
    assert [a.arm for a in summary.factors.arms if a.meets] == [
        "autotune_off", "autotune_off+deterministic"]

    effects = {(x.factor, x.property.topic,
                x.property.regime or x.property.what or x.property.probe): x
               for x in summary.factors.attribution}
    assert effects["autotune_off", "drift", "across loads"].effect == "always"
    assert effects["deterministic", "drift", "across loads"].effect == "never"
    for topic, what in (("survival", None), ("capacity", "kv"), ("probe", "prefix")):
        assert effects["deterministic", topic, what].effect == "always"
        assert effects["autotune_off", topic, what].effect == "never"
    assert effects["autotune_off", "startup", None].effect == "never"

    ship = summary.factors.ship
    assert (ship.arm, ship.factors, ship.meets, ship.costs) == (
        "autotune_off", ["autotune_off"], True, [])
    (left,) = ship.left_out
    assert (left.factor, left.arm, left.against) == (
        "deterministic", "autotune_off+deterministic", "autotune_off")
    assert sorted(map(claim_topic, left.costs)) == ["capacity", "prefix", "survival failure"]
    death = next(c for c in left.costs if isinstance(c, FailureClaim))
    assert death.point.outcome == "death" and death.limit is not None
    # the bisection found the fault front within the resolution
    assert death.limit.survives < DIES_ABOVE < death.limit.fails_from
    assert death.limit.fails_from - death.limit.survives <= death.limit.resolution
    text = ship_words.ship_lines(summary)
    assert text[0].startswith("Ship `autotune_off`")
    assert any("`deterministic`: not needed for reproducibility here" in line
               for line in text)
    assert any("324,186" in line and "93,574" in line for line in text)
    assert any(f"survives {death.limit.survives:,}, dies from {death.limit.fails_from:,}"
               in line for line in text)


def amended(kv_without_triton: int):
    """The seed's amended advice: --deterministic stops the reload drift on either
    backend; without --triton it dies above DIES_ABOVE prompt tokens and loses prefix
    reuse (`kv_without_triton` 0), or only holds a little less KV (a cost, not severe)."""
    def make(argv: list[str], launch: int) -> FakeEngine:
        deterministic, triton = "--deterministic" in argv, "--triton" in argv
        severe = deterministic and not triton and not kv_without_triton
        return FakeEngine(load_offset=0.0 if deterministic else 1e-4 * (launch + 1),
                          dies_above=DIES_ABOVE if severe else None,
                          kv_tokens=(kv_without_triton or 324_186)
                          if deterministic and not triton else 324_186,
                          prefix_cache=not severe)
    return make


@pytest.mark.parametrize("kv_without_triton", [0, 310_000])
def test_a_factor_the_criterion_does_not_need_is_kept_for_severe_costs_only(
        kv_without_triton: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    plan = factor_plan(tmp_path, factors={"deterministic": {"args": ["--deterministic"]},
                                          "triton": {"args": ["--triton"]}})
    summary = run(tmp_path, monkeypatch, plan, amended(kv_without_triton))
    assert summary.factors is not None
    ship = summary.factors.ship
    assert [a.arm for a in summary.factors.arms if a.meets] == [
        "deterministic", "deterministic+triton"]
    text = ship_words.ship_lines(summary)
    if kv_without_triton:
        # a 4 % smaller KV pool is a cost, not a severe one: the fewest factors win
        assert (ship.arm, ship.kept) == ("deterministic", [])
        assert [c.topic for c in ship.costs] == ["capacity"]
        assert text[0].startswith("Ship `deterministic`: the fewest factors")
        return
    # dies on long prompts and loses prefix reuse: triton is kept for that
    assert (ship.arm, ship.factors, ship.costs, ship.left_out) == (
        "deterministic+triton", ["deterministic", "triton"], [], [])
    (kept,) = ship.kept
    assert (kept.factor, kept.arm, kept.against) == (
        "triton", "deterministic", "deterministic+triton")
    assert set(map(claim_topic, kept.costs)) == {"survival failure", "prefix"}
    assert text[0].startswith("Ship `deterministic+triton`: of the arms that are "
                              "bit-identical")
    assert any(line.startswith("`triton`: not needed for reproducibility here, kept for "
                               "its costs; without it `deterministic` would cost")
               for line in text)


def test_drift_that_stops_only_with_both_factors_is_an_interaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    plan = factor_plan(tmp_path, probes={
        "repeat": {"count": 1}, "concurrency": {"enabled": False},
        "generate": {"enabled": False}, "speed": {"enabled": False},
        "prefix": {"enabled": False}, "sweep": {"enabled": False}})
    summary = run(tmp_path, monkeypatch, plan, both_needed)
    assert summary.factors is not None
    effects = {(x.factor, x.property.topic, x.property.regime): x
               for x in summary.factors.attribution}
    for factor, other in (("autotune_off", "deterministic"), ("deterministic", "autotune_off")):
        found = effects[factor, "drift", "across loads"]
        assert (found.effect, found.together_with) == ("interaction", [other])
    ship = summary.factors.ship
    assert ship.arm == "autotune_off+deterministic" and ship.meets
    assert ship.left_out == []
    # concurrency was not measured: the criterion is said to leave it out
    assert ship.unmeasured == ["concurrency"]
    assert any("only together with `deterministic`" in line
               for line in ship_words.attribution_lines(summary))


def test_when_no_arm_meets_the_criterion_the_best_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    plan = factor_plan(tmp_path, factors={"deterministic": {"args": ["--deterministic"]}},
                       probes={"repeat": {"count": 1}, "concurrency": {"enabled": False},
                               "generate": {"enabled": False}, "speed": {"enabled": False},
                               "prefix": {"enabled": False}, "sweep": {"enabled": False}})
    summary = run(tmp_path, monkeypatch, plan, the_case)
    assert summary.factors is not None
    ship = summary.factors.ship
    assert not ship.meets and ship.arm == "baseline"
    assert ship_words.ship_lines(summary)[0].startswith(
        "No arm meets the criterion")


def test_one_load_per_arm_leaves_drift_across_loads_unmeasured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # the concurrency control of a single load is not a comparison across loads: the
    # drift between loads that the_case has is not measured, and the answer says so
    plan = factor_plan(tmp_path, loads_per_arm=1)
    summary = run(tmp_path, monkeypatch, plan, the_case)
    assert summary.factors is not None
    assert all(a.drift[0].reproducible is None for a in summary.factors.arms)
    ship = summary.factors.ship
    assert ship.unmeasured == ["across loads"]
    assert (ship.arm, ship.meets) == ("baseline", True)
    first = ship_words.ship_lines(summary)[0]
    assert ("bit-identical within a load and across batch sizes and concurrency levels "
            "(across cold loads: not measured;") in first


def test_a_four_arm_run_reads_at_80_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    summary = run(tmp_path, monkeypatch, factor_plan(tmp_path), the_case)
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(run_view(summary))
    text = console.export_text()
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    assert lines[0] == "What to ship" and lines[1].startswith("Ship `autotune_off`")
    # every number of the drift table is whole on one line: moved, max |dNLL|, identical
    rows = [line for line in lines if "L1 vs L2" in line]
    assert len(rows) == len(summary.arms)
    for row, data in zip(rows, summary.arms.values(), strict=True):
        (pair,) = data.across_load
        cells = [c.strip() for c in row.split("│")]
        assert f"{pair.moved}/{pair.compared}" in cells
        assert fmt_nll(pair.max_abs_delta) in cells
        assert ("yes" if pair.bit_identical else "no") in cells
    for shift in summary.arm_shifts:
        assert f"{shift.moved}/{shift.compared}" in text
    # the survival marks of all four arms, and no column squeezed to nothing
    assert "DEATH" in text and "┳┳" not in text and "┃┃" not in text


def test_the_case_under_a_half_fraction_names_the_fix_and_the_costs_by_factor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # four factors, two of them inert: 8 arms of 16, none with autotune_off alone. The
    # design's arms still say that the drift across loads is gone exactly where
    # autotune_off is, and that the KV pool changed exactly where deterministic is; the
    # answer they predict (autotune_off alone) is not among them, so it is confirmed:
    # measured with the plan's loads, and What to ship rests on it
    factors = {"autotune_off": {"args": ["--autotune-off"]},
               "deterministic": {"args": ["--deterministic"]},
               "inert1": {"env": {"INERT1": "1"}}, "inert2": {"env": {"INERT2": "1"}}}
    plan = factor_plan(tmp_path, factors=factors)
    assert len(plan.arms) == 8 and "autotune_off" not in plan.arms
    summary = run(tmp_path, monkeypatch, plan, the_case)
    f = summary.factors
    assert f is not None and f.design is not None
    assert (f.design.kind, f.design.arms, f.design.full_arms, f.design.resolution) == (
        "fractional", 8, 16, 4)
    by = {(e.property.topic, e.property.regime, e.property.what): e
          for e in f.design.explanations}
    across = by[("drift", "across loads", None)]
    assert (across.kind, across.sets) == ("explained", [["autotune_off"]])
    assert sorted(across.holds) == sorted(a.arm for a in f.arms if "autotune_off" in a.factors)
    kv = by[("capacity", None, "kv")]
    assert (kv.kind, kv.sets) == ("explained", [["deterministic"]])
    assert f.ship.predicted == ["autotune_off"]
    assert (f.design.confirmation, f.design.confirmed) == ("autotune_off", True)
    assert (f.ship.arm, f.ship.meets, f.ship.costs) == ("autotune_off", True, [])
    assert read_confirmation(tmp_path / "run") == (
        ["autotune_off"], "the design predicts that `autotune_off` meets the criterion; its "
        "arm is measured with the plan's loads")
    text = "\n".join(ship_words.ship_lines(summary) + ship_words.attribution_lines(summary))
    assert "The design: a fraction of the full factorial, 8 of 16 arms, resolution IV" in text
    assert "drift across cold loads is gone exactly in the arms with `autotune_off`." in text
    assert "KV capacity changed against the baseline exactly in the arms with " \
           "`deterministic`." in text
    assert "`autotune_off` meets the criterion; its confirmation arm, measured with the " \
           "plan's drift and cost loads, does: the answer above rests on it." in text
    assert "`autotune_off x deterministic` = `inert1 x inert2`: aliased" in text


def six_flags(argv: list[str], launch: int) -> FakeEngine:
    """--fix-a and --fix-b stop the drift only together; --costly dies above DIES_ABOVE,
    cuts the KV pool to a third and loses prefix reuse; the rest change nothing."""
    fixed = "--fix-a" in argv and "--fix-b" in argv
    costly = "--costly" in argv
    return FakeEngine(load_offset=0.0 if fixed else 1e-4 * (launch + 1),
                      dies_above=DIES_ABOVE if costly else None,
                      kv_tokens=93_574 if costly else 324_186, prefix_cache=not costly)


def test_six_factors_a_fraction_and_its_confirmation_ship_what_the_full_factorial_ships(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    factors = {"fix_a": {"args": ["--fix-a"]}, "costly": {"args": ["--costly"]},
               "inert1": {"env": {"I1": "1"}}, "fix_b": {"args": ["--fix-b"]},
               "inert2": {"env": {"I2": "1"}}, "inert3": {"env": {"I3": "1"}}}
    answers = {}
    for kind, design in (("full", {"kind": "full"}),
                         ("fraction", {"kind": "fractional", "resolution": 3})):
        where = tmp_path / kind
        where.mkdir()
        summary = run(where, monkeypatch, factor_plan(where, factors=factors, design=design),
                      six_flags)
        f = summary.factors
        assert f is not None
        loads = len(read_evidence(where / "run").loads)
        answers[kind] = (f.ship.arm, f.ship.meets, f.ship.costs, loads)
    # 64 arms x 3 loads against 8 arms and the confirmation arm x 3 loads: under a quarter
    assert answers["full"][:3] == answers["fraction"][:3] == ("fix_a+fix_b", True, [])
    assert (answers["full"][3], answers["fraction"][3]) == (192, 27)


def test_a_resolution_iii_design_names_the_sets_it_cannot_tell_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # three factors in 4 arms (c = -(a x b)): baseline, a+b, a+c, b+c. The drift stops
    # only with both flags, in one arm: a+b. That arm is also every arm with a and b, and
    # the only arm without c: a resolution III design sees {a, b} and cannot rule out a
    # cause it did not vary alone, so it names what it found and does not guess
    factors = {"autotune_off": {"args": ["--autotune-off"]},
               "deterministic": {"args": ["--deterministic"]},
               "inert": {"env": {"INERT": "1"}}}
    plan = factor_plan(tmp_path, factors=factors,
                       design={"kind": "fractional", "resolution": 3})
    assert list(plan.arms) == ["baseline", "autotune_off+deterministic",
                               "autotune_off+inert", "deterministic+inert"]
    summary = run(tmp_path, monkeypatch, plan, both_needed)
    f = summary.factors
    assert f is not None and f.design is not None and f.design.resolution == 3
    assert ["autotune_off", "deterministic x inert"] in f.design.aliases
    across = next(e for e in f.design.explanations if e.property.regime == "across loads")
    assert across.holds == ["autotune_off+deterministic"]
    assert (across.kind, across.sets) == ("explained", [["autotune_off", "deterministic"]])
    text = "\n".join(ship_words.attribution_lines(summary))
    assert "`autotune_off` = `deterministic x inert`: aliased, this design cannot " \
           "separate their effects" in text


def test_a_fraction_of_factors_out_of_alphabetical_order_survives_the_lock_file(
        tmp_path: Path, fake_engine: None):
    # a fraction has no arm of each factor alone, from which the full factorial's lock
    # reads the factors' order back: its lock holds the order itself
    factors = {n: {"env": {n.upper(): "1"}} for n in ("zeta", "alpha", "mu", "beta")}
    plan = factor_plan(tmp_path, factors=factors)
    assert not plan.made_design().full
    write_lock(tmp_path, lock(plan, TEXTS))
    again = read_lock(tmp_path)
    assert list(again.plan.factors) == ["zeta", "alpha", "mu", "beta"]
    assert list(again.plan.arms) == list(plan.arms)
    write_lock(tmp_path, lock(plan, TEXTS))  # the same run: accepted
