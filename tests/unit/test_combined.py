"""Combined loads (`loads = "combined"`): drift and then cost probes in one cold load.

On the in-process fake engine, the seed's case (tests/unit/test_factors.py) run with
separate loads and with combined loads must give the same drift answer, the same costs
and the same What to ship, with half the cold starts; the cost part of a combined load is
gated as a cost load is, and a refused gate keeps the drift cells and resumes the rest.
Where the two parts would need two configurations (an engine whose drift loads isolate
its prefix cache), the plan is refused with the arm and the setting named.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff import quiet
from servediff.analysis.findings import Summary
from servediff.bundle import Layout, read_evidence
from servediff.errors import BusyMachineError, PlanError
from servediff.estimate import loads_text
from servediff.evidence import Conditions, LoadRecord
from servediff.plan import Plan, QuietSpec, resolve_plan
from servediff.probes import cells_of_load, protocol_size
from servediff.report.markdown import render
from servediff.schedule import schedule
from tests.unit.test_factors import factor_plan, run, the_case
from tests.unit.test_runner import TEXTS, model_folder


def records(root: Path) -> list[LoadRecord]:
    return sorted(read_evidence(root).loads, key=lambda r: r.launches[0].started_at)


def answer(summary: Summary) -> tuple[object, ...]:
    """The drift answer per arm and regime, What to ship and every cost it names."""
    assert summary.factors is not None
    ship = summary.factors.ship
    drift = {(a.arm, d.regime): (d.reproducible, d.moved) for a in summary.factors.arms
             for d in a.drift}
    left = [(x.factor, x.arm, sorted(c.topic for c in x.costs)) for x in ship.left_out]
    kv = {arm: c.capacity.kv_tokens for arm, c in summary.costs.items()}
    limits = {arm: (c.survival.limit.survives, c.survival.limit.fails_from)
              if c.survival and c.survival.limit else None for arm, c in summary.costs.items()}
    return drift, ship.arm, ship.factors, ship.meets, ship.costs, left, kv, limits


def test_the_schedule_puts_a_load_s_cost_cells_after_its_drift_cells(tmp_path: Path):
    plan = factor_plan(tmp_path, loads="combined", cost_loads_per_arm=3)
    order = schedule(plan)
    # two combined loads an arm, then the third cost load alone
    assert [x for x in order if x[0] == "baseline"] == [
        ("baseline", 1, "drift"), ("baseline", 2, "drift"), ("baseline", 3, "cost")]
    assert len(order) == 3 * len(plan.arms)
    cells = cells_of_load(plan, "baseline", 1)
    phases = [c.phase for c in cells]
    assert phases == sorted(phases, key=["drift", "cost"].index) and "cost" in phases
    assert {c.probe for c in cells if c.phase == "cost"} == {"prefix", "sweep"}
    assert all(c.load == 1 for c in cells)
    separate = factor_plan(tmp_path, cost_loads_per_arm=3)
    assert protocol_size(plan, TEXTS).cells == protocol_size(separate, TEXTS).cells
    assert loads_text(plan, protocol_size(plan, TEXTS)) == (
        "loads: combined, drift then cost probes in each cold load: 12 cold loads; "
        "separate drift and cost loads would take 20")


def test_combined_loads_give_the_separate_answer_in_half_the_cold_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    quiet = {"gate_cost": True, "action": "mark", "window_s": 0.05,
             "max_foreign_cpu": 1000, "max_load_per_core": 1000}
    separate = run(tmp_path / "separate", monkeypatch,
                   factor_plan(tmp_path, cost_loads_per_arm=2, quiet=quiet), the_case)
    combined = run(tmp_path / "combined", monkeypatch,
                   factor_plan(tmp_path, cost_loads_per_arm=2, loads="combined",
                               quiet=quiet), the_case)
    assert answer(combined) == answer(separate)
    assert answer(combined)[1:4] == ("autotune_off", ["autotune_off"], True)
    loads_s, loads_c = records(tmp_path / "separate" / "run"), records(
        tmp_path / "combined" / "run")
    assert (len(loads_s), len(loads_c)) == (16, 8)
    assert all(r.combined and r.phase == "drift" for r in loads_c)
    # every cost cell was measured by the combined load of its number, after its drift
    # cells, with the cost part's own gate
    evidence = read_evidence(tmp_path / "combined" / "run")
    for rec in loads_c:
        mine = [c for c in evidence.cells if (c.arm, c.load) == (rec.arm, rec.load)]
        drift = [c.started_at for c in mine if c.phase == "drift"]
        cost = [c.started_at for c in mine if c.phase == "cost"]
        assert cost and max(drift) < min(cost)
        first = rec.launches[0]
        assert first.gate is None and first.cost_gate is not None and first.cost_gate.quiet
    # the deterministic arms' sweep killed the engine: the load started again for the
    # cost cells left, never for drift cells already measured
    dead = [r for r in loads_c if len(r.launches) > 1]
    assert dead and all("deterministic" in r.arm for r in dead)
    assert combined.setup.loads == "combined" and separate.setup.loads == "separate"
    text = render(combined, "run")
    assert "each run by the drift load of its number after its drift probes" in text


def test_a_busy_machine_before_the_cost_part_stops_the_run_and_keeps_the_drift_cells(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # the machine as the gate sees it: busy at first, then quiet (a real reading either way)
    said: list[str] = ["load average 9.00 on 2 cores (limit 1.5 per core)"]
    real = quiet.look

    def look(spec: QuietSpec, baseline: dict[int, int],
             engine_up: bool = False) -> tuple[list[str], Conditions]:
        assert engine_up  # the gate of a cost part, with the load's own engine running
        return list(said), real(spec, baseline, engine_up)[1]
    monkeypatch.setattr(quiet, "look", look)
    plan = factor_plan(tmp_path, loads="combined",
                       quiet={"gate_cost": True, "window_s": 0.05, "wait_s": 0})
    with pytest.raises(BusyMachineError, match="the cost part of drift load 1 of"):
        run(tmp_path, monkeypatch, plan, the_case)
    layout = Layout(tmp_path / "run")
    (path,) = layout.loads()
    record = LoadRecord.model_validate(json.loads(path.read_text()))
    (launch,) = record.launches
    assert launch.cost_gate is not None and not launch.cost_gate.quiet
    assert launch.error is not None and "before the cost part" in launch.error
    assert launch.stop is not None  # the engine was stopped and its stop recorded
    drift = {p.name: p.read_bytes() for p in layout.cells()}
    assert drift and not any("-cost" in name for name in drift)
    # run again on a quiet machine: the same load starts again for its cost cells only
    said.clear()
    run(tmp_path, monkeypatch, plan, the_case)
    record = LoadRecord.model_validate(json.loads(path.read_text()))
    assert len(record.launches) >= 2 and record.launches[1].cost_gate is not None
    assert record.launches[1].cost_gate.quiet
    assert {p.name: p.read_bytes() for p in layout.cells() if p.name in drift} == drift
    assert any("-cost1-" in p.name for p in layout.cells())


def test_combined_loads_are_refused_where_drift_and_cost_need_two_configurations(
        tmp_path: Path):
    base = {"engine": "vllm", "model": str(model_folder(tmp_path)), "loads": "combined",
            "arms": {"a": {}, "b": {"args": ["--enforce-eager"]}}}
    with pytest.raises(PlanError) as refused:
        resolve_plan(base, "plan.toml", tmp_path)
    message = str(refused.value)
    assert "`a` does not" in message and "`b` does not" in message
    assert "engine_options.prefix_cache" in message
    # said once for both parts, the plan is valid
    plan, _ = resolve_plan({**base, "engine_options": {"prefix_cache": False}}, "plan.toml",
                           tmp_path)
    assert plan.combined("a", 1)
    with pytest.raises(ValueError, match='use loads = "separate" with scale.ray'):
        Plan.model_validate({**base, "scale": {"ray": "auto"}})
