"""The runner's schedule, resume, retry and partial rows, against an in-process fake engine.

No process and no socket: the launcher and the client factory are injected
(tests/engines/fake.py), so these run in well under a second each and test
only what the runner decides: which loads and cells, in what order, which
are skipped on resume, when an engine is started again, what is kept when it
dies mid-cell.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servediff.analysis.findings import ArmGap, ProbeOnSomeLoads
from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence, verify
from servediff.corpus import Corpus, Text
from servediff.plan import Plan
from servediff.probes import cells_of_load
from servediff.probes.speed import SpeedSettings
from servediff.report import markdown, words
from servediff.runner import Runner, SilentObserver
from servediff.schedule import schedule
from tests.engines.fake import FakeEngine, FakeLauncher

TEXTS = Corpus(name="fixture", texts=tuple(
    Text(tag=f"t{i}", text=" ".join(f"w{i}{j}" for j in range(6 + i))) for i in range(4)))


def model_folder(tmp_path: Path) -> Path:
    """A model folder the fake engine serves: a config with its BOS id and weights to hash."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"bos_token_id": 1}))
    (model / "model.safetensors").write_bytes(b"weights")
    return model


def plan(tmp_path: Path, **extra: object) -> Plan:
    body = {"engine": "transformers", "model": str(model_folder(tmp_path)), "loads_per_arm": 2,
            "arms": {"a": {}, "b": {}},
            "probes": {"repeat": {"count": 1}, "concurrency": {"enabled": False},
                       "generate": {"texts": 2, "max_tokens": 3, "repeats": 2},
                       "speed": {"enabled": False}, "sweep": {"enabled": False},
                       "prefix": {"enabled": False}}, **extra}
    return Plan.model_validate(body)


def run(tmp_path: Path, launcher: FakeLauncher, the_plan: Plan | None = None) -> Path:
    root = tmp_path / "run"
    Runner(the_plan or plan(tmp_path), TEXTS, root, tmp_path, SilentObserver(),
           launcher=launcher, clients=launcher.client).run()
    return root


def cells(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "cells").glob("*.json"))


def launches(root: Path, name: str) -> list[dict]:
    return json.loads((root / "loads" / f"{name}.json").read_text())["launches"]


def test_schedule_counterbalances_arms_and_puts_cost_loads_last(tmp_path: Path):
    p = plan(tmp_path, cost_loads_per_arm=2, probes={"speed": {"enabled": True}})
    assert schedule(p) == [("a", 1, "drift"), ("b", 1, "drift"), ("b", 2, "drift"),
                           ("a", 2, "drift"), ("a", 1, "cost"), ("b", 1, "cost"),
                           ("b", 2, "cost"), ("a", 2, "cost")]
    p = plan(tmp_path, probes={"repeat": {"count": 2, "batch_sizes": [4]},
                               "sweep": {"levels": [1]}})
    assert [c.name for c in cells_of_load(p, "a", 1)] == [
        "a-load1-score", "a-load1-repeat-r1", "a-load1-repeat-r2", "a-load1-batch-b4",
        "a-load1-concurrency", "a-load1-generate"]
    # speed first, the sweep (which may kill the engine) last and on the first cost load
    assert [c.name for c in cells_of_load(p, "a", 1, "cost")] == [
        "a-cost1-speed", "a-cost1-prefix", "a-cost1-sweep"]
    assert [c.name for c in cells_of_load(p, "a", 2, "cost")] == [
        "a-cost2-speed", "a-cost2-prefix"]


def test_a_plan_runs_every_cell_once_with_one_launch_per_load(tmp_path: Path):
    launcher = FakeLauncher()
    root = run(tmp_path, launcher)
    assert cells(root) == sorted(f"{arm}-load{n}-{c}" for arm in "ab" for n in (1, 2)
                                 for c in ("score", "repeat-r1", "generate"))
    assert len(launcher.launched) == 4
    for arm in "ab":
        for n in (1, 2):
            (launch,) = launches(root, f"{arm}-load{n}")
            assert launch["error"] is None and launch["stop"]["port_closed"]
            assert launch["engine"]["bos_token_id"] == 1 and launch["seconds_to_ready"] >= 0
    assert verify(root) > 10
    summary = summarize(read_evidence(root))
    assert {arm: d.signature.name for arm, d in summary.arms.items()} == {
        "a": "bit-identical", "b": "bit-identical"}
    score = json.loads((root / "cells" / "a-load1-score.json").read_text())
    assert [r["status"] for r in score["records"]] == ["ok"] * 4
    assert score["records"][0]["token_ids"][0] == 1  # the BOS head, from the model files


def test_resume_measures_only_what_is_missing(tmp_path: Path):
    root = run(tmp_path, FakeLauncher())
    before = {p.name: p.read_bytes() for p in (root / "cells").glob("*.json")}
    (root / "cells" / "b-load2-repeat-r1.json").unlink()
    again = FakeLauncher()
    run(tmp_path, again)
    assert len(again.launched) == 1  # only the load that lost a cell started again
    after = {p.name: p.read_bytes() for p in (root / "cells").glob("*.json")}
    assert set(after) == set(before)
    assert {k: v for k, v in after.items() if k != "b-load2-repeat-r1.json"} == \
        {k: v for k, v in before.items() if k != "b-load2-repeat-r1.json"}
    assert [x["attempt"] for x in launches(root, "b-load2")] == [1, 2]
    nothing = FakeLauncher()
    run(tmp_path, nothing)
    assert nothing.launched == []


def test_an_engine_that_does_not_start_is_started_again(tmp_path: Path):
    launcher = FakeLauncher([FakeEngine(starts=False)])
    root = run(tmp_path, launcher)
    first, second = launches(root, "a-load1")
    assert "exited with code -9 before it was ready" in first["error"]
    assert first["seconds_to_ready"] is None and second["error"] is None
    assert len(cells(root)) == 12
    summary = summarize(read_evidence(root))
    assert [(f.arm, f.load, f.attempt) for f in summary.failed_launches] == [("a", 1, 1)]
    # killed by a signal: no answer of the engine's own, so no refusal
    assert first["engine_refusal"] is None and summary.did_not_start == []


def test_rows_measured_before_a_death_are_kept_apart(tmp_path: Path):
    # ready check: 2 completion requests; then the score cell dies after 2 of 4 texts
    launcher = FakeLauncher([FakeEngine(dies_after=4)])
    root = run(tmp_path, launcher)
    partial = json.loads((root / "partial" / "a-load1-score-a1.json").read_text())
    assert [r["status"] for r in partial["records"]] == ["ok", "ok", "error"]
    first, _ = launches(root, "a-load1")
    assert "engine process died during a-load1-score" in first["error"]
    assert first["stop"]["died_before_stop"] is True
    score = json.loads((root / "cells" / "a-load1-score.json").read_text())
    assert score["launch"] == 2 and [r["status"] for r in score["records"]] == ["ok"] * 4
    summary = summarize(read_evidence(root))
    assert [(c.arm, c.probe, c.rows) for c in summary.partial_cells] == [("a", "score", 3)]


def test_max_attempts_ends_a_load_that_never_starts_and_the_run_goes_on(tmp_path: Path):
    launcher = FakeLauncher([FakeEngine(starts=False), FakeEngine(starts=False)])
    root = run(tmp_path, launcher)
    assert len(launches(root, "a-load1")) == 2  # launch.max_attempts
    assert not [c for c in cells(root) if c.startswith("a-load1")]
    assert len(cells(root)) == 9  # every other load measured
    summary = summarize(read_evidence(root))
    assert [g.kind for g in summary.gaps if isinstance(g, ArmGap) and g.arm == "a"] == [
        "loads missing"]


def test_a_run_that_gave_a_load_up_exits_5_and_the_same_command_completes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    from servediff.cli import main
    from servediff.cli import run as cli_run

    (tmp_path / "plan.toml").write_text(f"""
engine = "transformers"
model = "{model_folder(tmp_path)}"
loads_per_arm = 1
[arms.a]
[arms.b]
[corpus]
max_texts = 3
[probes.repeat]
count = 1
""" + "".join(f"[probes.{p}]\nenabled = false\n"
              for p in ("concurrency", "generate", "speed", "sweep", "prefix")))
    # a's engine answers its health check, then dies on every request: no cell, twice
    launcher = FakeLauncher([FakeEngine(starts=False), FakeEngine(starts=False)])
    monkeypatch.setattr(cli_run, "Runner", lambda *a, **k: Runner(
        *a, launcher=launcher, clients=launcher.client, **k))
    with pytest.raises(SystemExit) as done:
        main(["run", str(tmp_path / "plan.toml"), "--out", str(tmp_path / "run")])
    assert done.value.code == 5
    err = capsys.readouterr().err
    assert "incomplete: 2 planned cell(s) not measured (a-load1-score, a-load1-repeat-r1)" \
        in " ".join(err.split())
    assert cells(tmp_path / "run") == ["b-load1-repeat-r1", "b-load1-score"]
    launcher = FakeLauncher()  # the engine serves now: the same command measures the rest
    with pytest.raises(SystemExit) as done:
        main(["run", str(tmp_path / "plan.toml"), "--out", str(tmp_path / "run")])
    assert done.value.code in (0, None)
    assert len(cells(tmp_path / "run")) == 4


@pytest.mark.parametrize("prefix, head", [("none", []), (7, [7])])
def test_the_scoring_prefix_is_what_every_row_starts_with(tmp_path: Path, prefix, head):
    root = run(tmp_path, FakeLauncher(), plan(tmp_path, scoring={"prefix": prefix},
                                              loads_per_arm=1))
    score = json.loads((root / "cells" / "a-load1-score.json").read_text())
    for row in score["records"]:
        words = len(next(t for t in TEXTS.texts if t.tag == row["tag"]).text.split())
        assert row["token_ids"][:len(head)] == head and row["n_tokens"] == words + len(head)


def test_a_launch_left_without_a_stop_is_stopped_and_recorded_at_resume(tmp_path: Path):
    import subprocess
    import sys
    import time

    root = run(tmp_path, FakeLauncher())
    # As if servediff had been killed mid-load: a launch with no stop record whose
    # engine (here a sleeping process group) is still running.
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              start_new_session=True)
    try:
        record = json.loads((root / "loads" / "b-load2.json").read_text())
        killed = {**record["launches"][0], "attempt": 2, "pid": engine.pid, "pgid": engine.pid,
                  "started_at": time.time() - 5, "stop": None, "error": None}
        record["launches"].append(killed)
        (root / "loads" / "b-load2.json").write_text(json.dumps(record))
        (root / "cells" / "b-load2-generate.json").unlink()
        launcher = FakeLauncher()
        run(tmp_path, launcher)
        assert engine.wait(timeout=30) == -15
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    stale = launches(root, "b-load2")[1]
    assert stale["stop"]["at_resume"] is True and stale["stop"]["found_alive"] is True
    assert stale["error"] == "servediff ended before it stopped this launch"
    assert [x["attempt"] for x in launches(root, "b-load2")] == [1, 2, 3]
    assert len(launcher.launched) == 1  # the resumed load, for its missing cell
    summary = summarize(read_evidence(root))
    (failed,) = summary.failed_launches
    assert (failed.arm, failed.load, failed.attempt, failed.found_alive) == ("b", 2, 2, True)
    assert verify(root) > 10


def test_one_servediff_at_a_time_in_a_run_directory(tmp_path: Path):
    from servediff.bundle import exclusive
    from servediff.errors import OutputDirError

    with exclusive(tmp_path / "run"), pytest.raises(OutputDirError, match="another servediff"):
        run(tmp_path, FakeLauncher())


def test_repeats_and_the_grid_on_the_first_load_only_are_named(tmp_path: Path):
    p = plan(tmp_path, probes={"repeat": {"count": 1, "loads": [1]},
                               "concurrency": {"loads": [1], "lengths": [8], "levels": [1, 2],
                                               "requests": 2, "max_tokens": 2},
                               "speed": {"enabled": False}, "sweep": {"enabled": False},
                               "prefix": {"enabled": False}, "generate": {"enabled": False}})
    assert [c.name for c in cells_of_load(p, "a", 1)] == [
        "a-load1-score", "a-load1-repeat-r1", "a-load1-concurrency"]
    assert [c.name for c in cells_of_load(p, "a", 2)] == ["a-load2-score"]
    root = run(tmp_path, FakeLauncher(), p)
    summary = summarize(read_evidence(root))
    some = sorted((g.reason, g.count, g.of) for g in summary.gaps
                  if isinstance(g, ProbeOnSomeLoads))
    assert some == [("concurrency", 1, 2), ("repeat", 1, 2)]
    assert all(len(d.within_load) == 1 and d.concurrency for d in summary.arms.values())
    with pytest.raises(ValueError, match="probes.repeat.loads must name drift loads from 1"):
        plan(tmp_path, probes={"repeat": {"loads": [3]}})


class Events(SilentObserver):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def load_starting(self, arm: str, load: int, attempt: int, phase: str) -> None:
        self.seen.append(f"{arm}-{phase}{load}")

    def drift_finished(self, done: list[str], pending: list[str]) -> None:
        self.seen.append(f"drift of {','.join(done)} done, {','.join(pending)} pending")


def test_each_arms_drift_answer_is_announced_when_its_drift_loads_are_done(tmp_path: Path):
    # no quiet-box gate: the machine that runs the tests is not ours to keep quiet
    p = plan(tmp_path, cost_loads_per_arm=1, quiet={"gate_cost": False}, probes={
        "repeat": {"count": 0}, "concurrency": {"enabled": False},
        "generate": {"enabled": False}, "sweep": {"enabled": False},
        "prefix": {"enabled": False}, "speed": {"prompt_tokens": [8], "max_tokens": 2,
                                                "replicates": 1}})
    events = Events()
    launcher = FakeLauncher()
    Runner(p, TEXTS, tmp_path / "run", tmp_path, events, launcher=launcher,
           clients=launcher.client).run()
    # each arm's drift table as soon as its drift loads are done (b's second load runs
    # third: A B, B A), and the whole drift answer before the cost loads
    assert events.seen == ["a-drift1", "b-drift1", "b-drift2", "drift of b done, a pending",
                           "a-drift2", "drift of a,b done,  pending", "a-cost1", "b-cost1"]


def test_speed_at_a_level_above_one_keeps_one_sample_per_replicate_with_throughput(
        tmp_path: Path):
    p = plan(tmp_path, cost_loads_per_arm=1, quiet={"gate_cost": False},
             arms={"a": {}}, loads_per_arm=1, probes={
                 "repeat": {"count": 0}, "concurrency": {"enabled": False},
                 "generate": {"enabled": False}, "sweep": {"enabled": False},
                 "prefix": {"enabled": False},
                 "speed": {"prompt_tokens": [8], "max_tokens": 3, "warmup": 1,
                           "replicates": 2, "levels": [3, 1, 3]}})
    assert p.probes.get(SpeedSettings).levels == [1, 3]
    root = run(tmp_path, FakeLauncher(), p)
    speed = json.loads((root / "cells" / "a-cost1-speed.json").read_text())["speed"]
    assert [(s["concurrency"], s["warmup"]) for s in speed] == [
        (1, True), (1, False), (1, False), (3, True), (3, False), (3, False)]
    alone, together = speed[1], speed[4]
    assert alone["throughput_tok_s"] > 0 and together["throughput_tok_s"] > 0
    assert together["generated"] == 3 and together["status"] == "ok"
    summary = summarize(read_evidence(root))
    assert [(e.concurrency, e.replicates) for e in summary.costs["a"].speed.per_length] == [
        (1, 2), (3, 2)]


def test_a_run_without_a_terminal_prints_plain_lines_with_position_and_eta(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    import re

    from servediff.cli.progress import RichObserver

    p = plan(tmp_path, cost_loads_per_arm=1, quiet={"gate_cost": False}, probes={
        "repeat": {"count": 0}, "concurrency": {"enabled": False},
        "generate": {"enabled": False}, "sweep": {"enabled": False},
        "prefix": {"enabled": False}, "speed": {"prompt_tokens": [8], "max_tokens": 2,
                                                "replicates": 1, "levels": [1]}})
    launcher = FakeLauncher()
    with RichObserver() as observer:  # stderr is captured here: not a terminal
        assert observer.plain
        Runner(p, TEXTS, tmp_path / "run", tmp_path, observer, launcher=launcher,
               clients=launcher.client).run()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "6 loads and 6 cells to measure"
    done = [line for line in lines if ": done in " in line]
    assert len(done) == 6
    for i, line in enumerate(done, start=1):
        # after cell i: the next cell's position, the load it is in, elapsed and what is left
        assert re.match(rf"\[cell {min(i + 1, 6)} of 6, load \d of 6, \d+:\d\d elapsed, "
                        r"about \d+:\d\d left\] \S+: done in \d+\.\ds$", line), line
    assert any(re.match(r"\[cell 5 of 6, load 5 of 6, .*\] a cost load 1: cold start$", x)
               for x in lines), lines


REFUSAL = ("ValueError: Currently only ['triton'] attention backends are supported for "
           "deterministic inference, but you explicitly specified 'torch_native'.")


def test_an_arm_whose_engine_refuses_its_flags_did_not_start_and_the_others_run(
        tmp_path: Path):
    # the schedule: a1, b1 (refused at both attempts), b2 (not started), a2
    launcher = FakeLauncher([FakeEngine(), FakeEngine(refuses=REFUSAL),
                             FakeEngine(refuses=REFUSAL)])
    root = run(tmp_path, launcher)
    assert cells(root) == sorted(f"a-load{n}-{p}" for n in (1, 2)
                                 for p in ("score", "repeat-r1", "generate"))
    first, second = launches(root, "b-load1")
    assert first["engine_refusal"] == second["engine_refusal"] == REFUSAL
    assert "exited with code 1 before it was ready: ValueError: Currently" in first["error"]
    assert not (root / "loads" / "b-load2.json").exists()
    assert len(launcher.launched) == 4
    summary = summarize(read_evidence(root))
    (refused,) = summary.did_not_start
    assert (refused.arm, refused.message, refused.launches) == ("b", REFUSAL, 2)
    (pair,) = summary.verdict.pairs
    (claim,) = [c for c in pair.claims if c.topic == "refused"]
    assert (claim.kind, claim.arm) == ("cost", "b") and pair.costs >= 1
    assert "`b` did not start" in words.claim_text(claim)
    assert "this configuration does not exist on this stack" in words.claim_text(claim)
    report = markdown.render(summary, "run")
    broke = report.split("## What broke")[1].split("##")[0]
    assert f'`b` did not start: the engine refused it at all 2 launches ("{REFUSAL}")' in broke


def test_a_launch_servediff_stopped_does_not_hide_an_engine_s_refusal(tmp_path: Path):
    """A refused launch, one that servediff's own interrupt stopped before it was ready
    (a time budget's end, in h200-sglang-fp8-autotune), then another refusal: the arm did
    not start. Before, the interrupted launch kept it from counting as refused, and its
    pair said "no cost observed"."""
    from servediff.evidence import INTERRUPTED, Launch, LoadRecord

    def launch(attempt: int, **said: Any) -> Launch:
        return Launch(attempt=attempt, command=["engine"], env_diff={}, options={},
                      host="127.0.0.1", port=8000, pid=1, started_at=0.0, **said)

    refused = launch(1, engine_refusal=REFUSAL, error=f"exited: {REFUSAL}")
    stopped = launch(2, error=INTERRUPTED)
    again = launch(3, engine_refusal=REFUSAL, error=f"exited: {REFUSAL}")
    record = LoadRecord(arm="b", load=1, launches=[refused, stopped, again])
    assert record.did_not_start(2) == REFUSAL
    # one refusal and the interrupt are not two refusals; a launch that was ready counts
    assert LoadRecord(arm="b", load=1, launches=[refused, stopped]).did_not_start(2) is None
    ready = launch(2, error=INTERRUPTED, seconds_to_ready=3.0)
    assert LoadRecord(arm="b", load=1, launches=[refused, ready, again]).did_not_start(2) \
        is None


def test_an_arm_with_nothing_measured_is_never_called_free(tmp_path: Path):
    """Arm `c` has no cell (its loads were never run to a cell) and was not refused: its
    pair says nothing was compared, never "no cost observed"."""
    from tests.fixtures.bundles import cell, make_bundle, speed_cell

    cells = [cell(arm, load) for arm in ("a", "b") for load in (1, 2)]
    cells += [speed_cell(arm, load, [100.0, 101.0, 99.0], [0.2, 0.21, 0.19])
              for arm in ("a", "b") for load in (1, 2)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a", "b", "c"),
                                                  cost=True)))
    pairs = {p.arm: p for p in summary.verdict.pairs}
    assert pairs["b"].unmeasured == [] and "no cost observed within" in words.headline(
        pairs["b"])
    assert pairs["c"].unmeasured == ["c"]
    assert words.headline(pairs["c"]).startswith(
        "`c` vs `a`: nothing compared: `c` has no measured cell")
    assert "no cost" not in words.headline(pairs["c"])



def test_a_hang_in_the_speed_probe_ends_the_launch_and_the_load_runs_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # as the transport reports a request the engine neither answered nor worked on for a
    # whole stall window: the launch ends (not one error sample a timeout long per
    # replicate), and the cost load is started again for its speed cell
    from servediff.errors import EngineRequestError
    from servediff.probes import speed

    real, hangs = speed._at_once, [1]

    def at_once(ctx, batch, max_tokens):  # type: ignore[no-untyped-def]
        if hangs:
            hangs.pop()
            raise EngineRequestError("no answer", timed_out=True, stalled=True)
        return real(ctx, batch, max_tokens)

    monkeypatch.setattr(speed, "_at_once", at_once)
    # no quiet-box gate: the machine that runs the tests is not ours to keep quiet
    the_plan = plan(tmp_path, arms={"a": {}}, loads_per_arm=1, cost_loads_per_arm=1,
                    quiet={"gate_cost": False},
                    probes={"repeat": {"count": 1}, "concurrency": {"enabled": False},
                            "generate": {"enabled": False}, "sweep": {"enabled": False},
                            "prefix": {"enabled": False},
                            "speed": {"prompt_tokens": [16], "levels": [1],
                                      "replicates": 3, "max_tokens": 4}})
    root = run(tmp_path, FakeLauncher(), the_plan)
    first, again = launches(root, "a-cost1")
    assert "engine hung" in (first["error"] or "")
    assert again["error"] is None
    cell = json.loads((root / "cells" / "a-cost1-speed.json").read_text())
    assert cell["launch"] == 2
    assert [s["status"] for s in cell["speed"]] == ["ok"] * 4  # warm-up and 3 replicates
