"""Survival recording against a real engine that dies or hangs above a prompt length.

The engine is the embedded transformers server wrapped by
tests/engines/fragile_server.py: one arm aborts the process on a prompt over
600 tokens, one hangs while its health check still answers, one answers
such prompts only after computing for longer than the request timeout, one is
healthy. The sweep must record death and hang at the right lengths, call the
slow engine slow (it kept working: not a hang), restart the engine after a
death or hang, measure every other point, and `rederive` must give the same
survival map, noise bands and verdict. The healthy arm may be slow too on a
busy machine: that is recorded as slow, never as a hang.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servediff.report.costs import OUTCOME_MARK
from tests.integration.engines import (
    MARK_BUSY,
    assert_all_stopped,
    claims,
    probes_off,
    servediff,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "tests.engines.fragile_server", "--model", "{model}",
           "--host", "{host}", "--port", "{port}"]
PLAN = f"""
engine = "transformers"
model = "smollm2"
loads_per_arm = 1
cost_loads_per_arm = 1
[launch]
command = {json.dumps(COMMAND)}
env = {{ PYTHONPATH = {json.dumps(str(ROOT))} }}
stall_window_s = 5
[engine_options]
device = "cpu"
max_model_len = 1024
[arms.stock]
[arms.dies]
args = ["--die-above", "600"]
[arms.hangs]
args = ["--hang-above", "600"]
[arms.slow]
args = ["--slow-above", "600", "--slow-s", "12"]
[corpus]
tags = ["json-event", "prose-harbour"]
[probes.repeat]
count = 0
[probes.speed]
prompt_tokens = [128]
max_tokens = 8
replicates = 3
levels = [1]
[probes.sweep]
start = 256
levels = [1, 2]
request_timeout_s = 8
resolution = 256
""" + probes_off("concurrency", "generate", "prefix") + MARK_BUSY


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("survival")
    (work / "plan.toml").write_text(PLAN)
    done = servediff("run", "plan.toml", "--out", "run", cwd=work)
    assert done.returncode == 0, done.stderr[-4000:]
    return work / "run"


ARMS = ("stock", "dies", "hangs", "slow")


def sweep(run: Path, arm: str) -> dict:
    return json.loads((run / "cells" / f"{arm}-cost1-sweep.json").read_text())


def test_every_point_is_measured_and_failures_are_named(run: Path):
    planned = [[256, 1], [512, 1], [1023, 1], [1280, 1], [256, 2], [512, 2], [1023, 2]]
    # after the single prompts, the arms that fail above 600 tokens bisect between 512
    # (held) and 1,023 (failed) until the two are 256 tokens apart: one point, 767 (the
    # bisection to the token against a fault front: tests/unit/test_factors.py)
    bisected = [[767, 1]]
    for arm in ARMS:
        cell = sweep(run, arm)
        assert cell["context_length"] == 1024
        extra = bisected if arm in ("dies", "hangs") else []
        assert cell["sweep_plan"] == planned + extra
        assert [[p["length"], p["level"]] for p in cell["sweep"]] == \
            planned[:4] + extra + planned[4:], arm
    outcome = {arm: {(p["length"], p["level"]): p for p in sweep(run, arm)["sweep"]}
               for arm in ARMS}
    # the healthy engine refuses the prompt past its context with a real error response;
    # on a busy machine it may answer after the request timeout: slow, never a hang
    for key, p in outcome["stock"].items():
        assert p["outcome"] in (("error",) if key == (1280, 1) else ("ok", "slow")), (key, p)
    # the slow engine kept computing past the 8 s timeout: slow, answered, not a hang
    for key, p in outcome["slow"].items():
        want = ("error",) if key == (1280, 1) else ("slow",) if key[0] > 600 else ("ok", "slow")
        assert p["outcome"] in want, (key, p)
        if key[0] > 600:
            assert min(p["request_seconds"]) > 12, (key, p)
    assert all(p["achieved_ok"] for k, p in outcome["slow"].items() if k[0] < 1280)
    assert outcome["stock"][(1280, 1)]["http_status"] == 400
    assert "exceeds max_model_len 1024" in outcome["stock"][(1280, 1)]["error"]
    assert all(p["achieved_ok"] for k, p in outcome["stock"].items() if k != (1280, 1))
    for arm, kind in (("dies", "death"), ("hangs", "hang")):
        for key, p in outcome[arm].items():
            # below the fault these arms are healthy engines: on a busy machine a short
            # prompt may also answer after the 8 s timeout (slow), never die or hang
            want = (kind,) if key[0] > 600 else ("ok", "slow")
            assert p["outcome"] in want, (arm, key, p)
    death = outcome["dies"][(1023, 1)]
    assert death["signal"] == "SIGABRT" and death["returncode"] == -6
    assert "fragile: a prompt of 1023 tokens; aborting" in death["log_tail"]
    hang = outcome["hangs"][(1023, 1)]
    assert hang["health_answered"] is True and "did no work" in hang["error"]
    # each death or hang ended its launch; the next launch went on from the next point;
    # after the last point's failure no engine was started only to close the cell
    for arm in ("dies", "hangs"):
        launches = json.loads((run / "loads" / f"{arm}-cost1.json").read_text())["launches"]
        assert len(launches) == 4
        assert all("sweep:" in (x["error"] or "") for x in launches)
        assert "restarted" not in launches[-1]["error"]
        assert [p["launch"] for p in sweep(run, arm)["sweep"]] == [1, 1, 1, 2, 3, 4, 4, 4]
    launches = json.loads((run / "loads" / "slow-cost1.json").read_text())["launches"]
    assert len(launches) == 1 and launches[0]["error"] is None
    assert not list((run / "partial").glob("*-progress.json"))
    assert_all_stopped(run)


def test_survival_map_and_verdict(run: Path):
    summary = json.loads((run / "summary.json").read_text())
    costs = summary["costs"]
    assert costs["stock"]["survival"]["largest_ok_length"] == {"1": 1023, "2": 1023}
    assert costs["dies"]["survival"]["largest_ok_length"] == {"1": 512, "2": 512}
    assert costs["dies"]["survival"]["limit"] == {
        "survives": 512, "fails_from": 767, "outcome": "death", "resolution": 256,
        "resolved": True}
    # the map matches the raw outcomes point by point
    for arm in ARMS:
        raw = {(p["length"], p["level"]): p["outcome"] for p in sweep(run, arm)["sweep"]}
        got = {(p["length"], p["level"]): p["outcome"]
               for p in costs[arm]["survival"]["points"]}
        assert got == raw
    dies = claims(run, "dies", "cost")
    assert ("`dies`: the server process died at the first prompt of 767 tokens (SIGABRT); "
            "survives 512, dies from 767 tokens (to 256 tokens)") in dies
    hangs = claims(run, "hangs", "cost")
    assert ("`hangs`: requests hung (no answer, no work) at the first prompt of 767 tokens "
            "while its health check still answered; survives 512, hangs from 767 tokens "
            "(to 256 tokens)") in hangs
    survival = set(claims(run, "dies", "survival"))
    assert ("`dies`, single prompts: survives 512, dies from 767 tokens (to 256 tokens); "
            "longest that held 512 tokens; levels 1, 2") in survival
    # slow is not a failure: no cost claim about the slow arm's survival
    assert not [c for c in claims(run, "slow", "cost") if "`slow`:" in c]
    assert costs["slow"]["survival"]["largest_ok_length"] == {"1": 1023, "2": 1023}
    report = (run / "report.md").read_text()
    marks = {arm: {(p["length"], p["level"]): p["outcome"] for p in sweep(run, arm)["sweep"]}
             for arm in ARMS}
    row = " | ".join(OUTCOME_MARK[marks[arm][(1023, lv)]] if arm in ("stock", "slow")
                     else {"dies": "DEATH SIGABRT", "hangs": "HANG"}[arm]
                     for arm in ARMS for lv in (1, 2))
    assert f"| 1,023 | {row} |" in report
    assert "| 1,280 | error 400 | - | DEATH SIGABRT | - | HANG | - | error 400 | - |" in report
    # speed: 3 kept replicates per arm, with a band per metric
    speed = costs["stock"]["speed"]["per_length"][0]
    assert speed["replicates"] == 3 and speed["decode_tok_s"]["band95"] is not None


def test_rederive_gives_the_same_bands_and_verdict(run: Path):
    done = servediff("rederive", str(run), "--json", cwd=run.parent)
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    summary = json.loads((run / "summary.json").read_text())
    assert again["costs"] == summary["costs"]
    assert again["verdict"] == summary["verdict"]
    assert servediff("verify", str(run), cwd=run.parent).returncode == 0
