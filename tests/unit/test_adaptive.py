"""Adaptive cost loads on the in-process fake engine with known speed and known noise.

The fake engine's latency is a function of its flags, plus noise between replicates and
between loads from a seeded generator; the speed probe reads a clock that the engine
advances by that latency, so the timings are known exactly and no test waits on them.
A flag that halves every speed is clear after the plan's two cost loads and gets none
added; a flag that changes nothing stays within noise, gets its added loads up to
`max_cost_loads`, and is then called within noise, with the loads it took.
"""

from __future__ import annotations

import json
import random
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from servediff.analysis.findings import Summary
from servediff.bundle import Layout, read_evidence
from servediff.errors import PlanError
from servediff.plan import Plan, load_plan_file
from servediff.report.markdown import render
from tests.engines.fake import FakeEngine
from tests.unit.test_factors import run
from tests.unit.test_runner import model_folder

PREFILL_S_PER_TOKEN = 1e-4
DECODE_S_PER_TOKEN = 0.02


class VirtualClock:
    """The speed probe's clock: it moves only when the engine answers."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


@dataclass
class TimedEngine(FakeEngine):
    """A fake engine whose answers take a known time: prefill and decode per token,
    `slowdown` times slower, with noise of `noise` (relative) per request and per load."""

    clock: VirtualClock | None = None
    slowdown: float = 1.0
    load_factor: float = 1.0
    rng: random.Random | None = None
    noise: float = 0.02

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/completions" and self.clock is not None and self.rng:
            body = json.loads(request.content or b"{}")
            if body.get("prompt_logprobs") is None:
                prompt = body.get("prompt") or []
                seconds = (len(prompt) * PREFILL_S_PER_TOKEN
                           + int(body.get("max_tokens", 1)) * DECODE_S_PER_TOKEN)
                jitter = 1 + self.rng.gauss(0, self.noise)
                self.clock.now += seconds * self.slowdown * self.load_factor * jitter
        return super().handle(request)


def timed_plan(tmp_path: Path, **extra: Any) -> Plan:
    return Plan.model_validate({
        "engine": "fake", "model": str(model_folder(tmp_path)), "loads_per_arm": 1,
        "cost_loads_per_arm": 2, "adaptive": True, "max_cost_loads": 4,
        # other processes on a busy test machine would mark the cells busy: not this test
        "quiet": {"gate_cost": False, "max_foreign_cpu": 1000},
        "arms": {"baseline": {}, "flagged": {"args": ["--flag"]}},
        "probes": {"repeat": {"count": 0}, "concurrency": {"enabled": False},
                   "generate": {"enabled": False}, "prefix": {"enabled": False},
                   "sweep": {"enabled": False},
                   "speed": {"prompt_tokens": [64], "max_tokens": 8, "levels": [1],
                             "warmup": 0, "replicates": 4}}, **extra})


def run_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: Plan,
              slowdown: float) -> Summary:
    clock = VirtualClock()
    monkeypatch.setattr("servediff.probes.speed.time", types.SimpleNamespace(
        monotonic=clock.monotonic, sleep=clock.sleep))
    rng = random.Random(7)

    def make(argv: list[str], launch: int) -> FakeEngine:
        # each load its own speed, a little off the arm's (the noise between loads)
        return TimedEngine(clock=clock, rng=rng, slowdown=slowdown if "--flag" in argv else 1,
                           load_factor=1 + rng.gauss(0, 0.03), kv_tokens=100_000)
    return run(tmp_path, monkeypatch, plan, make)


def speed_rows(summary: Summary) -> list[Any]:
    return [row for comp in summary.comparisons for row in comp.speed]


def cost_loads(tmp_path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in Layout(tmp_path / "run").loads():
        record = json.loads(path.read_text())
        if record["phase"] == "cost":
            counts[record["arm"]] = counts.get(record["arm"], 0) + 1
    return counts


def test_a_large_difference_is_clear_after_two_cost_loads_and_gets_none_added(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    summary = run_timed(tmp_path, monkeypatch, timed_plan(tmp_path), slowdown=2.0)
    assert {row.verdict for row in speed_rows(summary)} == {"cost"}
    assert cost_loads(tmp_path) == {"baseline": 2, "flagged": 2}
    assert not Layout(tmp_path / "run").cost_loads.exists()
    assert summary.setup.cost_loads == {}
    # one run's bands say nothing of the noise between runs, and the run says so
    assert [g.count for g in summary.gaps if g.kind == "one run"] == [2]


def test_a_difference_within_noise_gets_its_added_loads_and_is_then_within_noise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    summary = run_timed(tmp_path, monkeypatch, timed_plan(tmp_path), slowdown=1.0)
    rows = speed_rows(summary)
    assert rows and {row.verdict for row in rows} == {"within noise"}
    assert cost_loads(tmp_path) == {"baseline": 4, "flagged": 4}
    assert summary.setup.cost_loads == {"baseline": 4, "flagged": 4}
    assert all(len(row.load_means[0]) == len(row.load_means[1]) == 4 for row in rows)
    # each round is written down with what asked for it
    rounds = json.loads(Layout(tmp_path / "run").cost_loads.read_text())["rounds"]
    assert [r["loads"] for r in rounds] == [{"baseline": 3, "flagged": 3},
                                            {"baseline": 4, "flagged": 4}]
    assert "against `flagged`: decode_tok_s at 64 tokens: within noise" in \
        rounds[0]["unsure"]["baseline"]
    # the added loads ran after the plan's, alternating: A B B A, then B A for the fourth
    order = [(x.arm, x.load) for x in sorted(read_evidence(tmp_path / "run").loads,
                                             key=lambda r: r.launches[0].started_at)
             if x.phase == "cost"]
    assert order[4:] == [("baseline", 3), ("flagged", 3), ("flagged", 4), ("baseline", 4)]
    text = render(summary, "run")
    assert "within noise over 4 and 4 cost loads" in text
    assert "2 cost load(s) per arm (added where a speed comparison was within noise: " \
           "`baseline` 4, `flagged` 4)" in text
    assert "speed noise between runs: the bands cover this run's replicates and its cost " \
           "loads (4 or more per arm), not a second run of the plan" in text


def test_an_interrupted_round_resumes_the_loads_it_added(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    plan = timed_plan(tmp_path, max_cost_loads=3)
    run_timed(tmp_path, monkeypatch, plan, slowdown=1.0)
    # as if servediff had stopped after writing the round, before its loads: they are
    # measured again on resume, and no round beyond the maximum is added
    layout = Layout(tmp_path / "run")
    for path in layout.loads():
        if path.name.endswith("cost3.json"):
            path.unlink()
    for path in layout.cells():
        if "-cost3-" in path.name:
            path.unlink()
    summary = run_timed(tmp_path, monkeypatch, plan, slowdown=1.0)
    assert cost_loads(tmp_path) == {"baseline": 3, "flagged": 3}
    assert summary.setup.cost_loads == {"baseline": 3, "flagged": 3}
    assert len(json.loads(layout.cost_loads.read_text())["rounds"]) == 1


def test_adaptive_needs_room_above_the_plan_s_cost_loads(tmp_path: Path):
    plan = tmp_path / "plan.toml"
    plan.write_text(f'engine = "transformers"\nmodel = "{model_folder(tmp_path)}"\n'
                    "cost_loads_per_arm = 3\nadaptive = true\nmax_cost_loads = 3\n"
                    "[arms.a]\n")
    with pytest.raises(PlanError, match="max_cost_loads: must be above cost_loads_per_arm"):
        load_plan_file(plan)
