"""The demo sized to a time budget (servediff.budget): cuts in a fixed order, only as
many as the estimate needs, each leaving every probe kind with what it needs."""

from __future__ import annotations

import copy
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from servediff.budget import CUTS, LONG, fit
from servediff.estimate import Estimate, Rates, estimate
from servediff.plan import resolve_plan
from servediff.probes import protocol_size
from servediff.probes.repeat import RepeatSettings
from servediff.probes.speed import SpeedSettings
from servediff.probes.sweep import SweepSettings

DEMO = tomllib.loads(resources.files("servediff.plans").joinpath("demo.toml").read_text())
# a slow machine: float32 on a CPU of half the reference's speed
SLOW = (Rates("CPU", prefill_tok_s=370.0, decode_tok_s=13.0, parameters=134_515_008,
              source="a slow CPU"), 12.0)


def seconds(raw: dict[str, Any], tmp_path: Path) -> float:
    plan, corpus = resolve_plan(raw, "demo.toml", tmp_path)
    found = estimate(plan, protocol_size(plan, corpus), tmp_path, SLOW)
    assert isinstance(found, Estimate)
    return found.seconds


def test_the_demo_is_cut_only_as_far_as_its_budget_needs(tmp_path: Path):
    whole = seconds(DEMO, tmp_path)
    # a budget it fits: nothing cut
    same, cuts, expected = fit(DEMO, whole + 1, lambda r: seconds(r, tmp_path))
    assert cuts == [] and same == DEMO and expected == whole
    # a tighter budget: the first cuts, in order, and an estimate within it
    _, cuts, expected = fit(DEMO, whole * 0.7, lambda r: seconds(r, tmp_path))
    assert 0 < len(cuts) < len(CUTS) and cuts == [c.says for c in CUTS[:len(cuts)]]
    assert expected <= whole * 0.7 < seconds(DEMO, tmp_path)
    assert "loads" not in DEMO  # the packaged plan itself is not changed


@pytest.mark.parametrize("cut", range(len(CUTS) + 1))
def test_every_cut_keeps_every_probe_with_what_it_needs(tmp_path: Path, cut: int):
    raw = copy.deepcopy(DEMO)
    for c in CUTS[:cut]:
        c.apply(raw)
    plan, corpus = resolve_plan(raw, "demo.toml", tmp_path)
    # every probe kind still runs
    assert all(s.on() for s in plan.probes.sections())
    assert plan.probes.get(RepeatSettings).count >= 1
    # drift across loads and a noise band: two loads and two cost loads of 3 replicates
    assert plan.loads_per_arm == 2 and plan.cost_loads_per_arm == 2
    speed = plan.probes.get(SpeedSettings)
    assert speed.replicates == 3 and speed.levels == [1, 2]
    assert plan.probes.get(SweepSettings).levels == [1, 2]
    # short texts and long ones
    tags = {t.tag for t in corpus.texts}
    assert len(set(LONG) & tags) >= 3 and len(tags - set(LONG)) >= 10


def test_the_demo_cuts_itself_from_the_rates_it_measures_and_resumes_as_locked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from servediff import calibrate
    from servediff.bundle import write_lock
    from servediff.cli import run as cli_run
    from servediff.plan import lock

    asked: list[str] = []

    def measured(plan: Any, corpus: Any, say: Any) -> tuple[Rates, float]:
        asked.append(plan.name)
        return SLOW

    monkeypatch.setattr(calibrate, "embedded_rates", measured)
    whole, _, none = cli_run.sized_demo(0, tmp_path)
    assert none is None and asked == [] and whole.loads == "separate"
    plan, corpus, rates = cli_run.sized_demo(300, tmp_path)
    assert asked == ["demo"] and rates == SLOW
    assert plan.loads == "combined" and plan != whole  # cut, at a slow machine's rates
    # a demo resumed keeps the plan its run directory was locked with: no new measurement
    root = tmp_path / "run"
    root.mkdir()
    write_lock(root, lock(plan, corpus))
    ran: list[Any] = []

    class Stop(Exception):
        pass

    def runner(plan: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(plan)
        raise Stop

    monkeypatch.setattr(cli_run, "Runner", runner)
    with pytest.raises(Stop):
        cli_run.execute(None, root, budget_s=300)
    assert asked == ["demo"] and ran == [plan]


def test_the_rates_are_measured_on_the_real_embedded_engine(tmp_path: Path):
    """servediff.calibrate on SmolLM2 itself, float32 on this CPU: rates a CPU can give
    (a 2-core one gives hundreds of prompt tokens and tens of generated tokens a second)."""
    from servediff.calibrate import embedded_rates

    raw = copy.deepcopy(DEMO)
    raw["engine_options"]["dtype"] = "float32"
    plan, corpus = resolve_plan(raw, "demo.toml", tmp_path)
    rates, start = embedded_rates(plan, corpus, lambda message: None)
    assert rates.source == "this machine, measured just now in float32"
    assert 10 < rates.prefill_tok_s < 1_000_000 and 0.5 < rates.decode_tok_s < 10_000
    assert rates.prefill_tok_s > rates.decode_tok_s and 0 < start < 600


def test_the_time_the_measurement_takes_comes_out_of_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The budget is the demo's whole time: a measurement that takes 100 s of 600 leaves
    the run 500, so the demo is cut further than with the measurement free."""
    from servediff import budget, calibrate

    clock = iter([0.0, 100.0])
    monkeypatch.setattr(budget.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(calibrate, "embedded_rates", lambda *args: SLOW)
    sized = budget.size_demo(copy.deepcopy(DEMO), 600, tmp_path, lambda message: None)
    assert sized.measuring_s == 100.0
    _, free, _ = fit(DEMO, 600, lambda raw: seconds(raw, tmp_path))
    _, paid, expected = fit(DEMO, 500, lambda raw: seconds(raw, tmp_path))
    assert sized.cuts == paid and len(paid) > len(free)
    assert sized.expected == pytest.approx(expected)
