"""The embedded transformers engine, really started and stopped as subprocesses.

These are the proof that the runner, the adapter and the analysis work on a
real model: every number the analysis reports is checked here against the
per-text numbers stored in the raw cells, recomputed independently.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path

import pytest

from tests.integration.engines import (
    DRIFT_ONLY,
    TAGS,
    assert_all_stopped,
    assert_started,
    servediff,
    servediff_running,
    signature,
)

pytestmark = pytest.mark.integration

PLAN = f"""
name = "it"
engine = "transformers"
model = "smollm2"
loads_per_arm = 2

[engine_options]
device = "cpu"

[arms.bs1]
options = {{ batch_size = 1 }}

[arms.bs4]
options = {{ batch_size = 4 }}

[corpus]
tags = {json.dumps(TAGS)}

[probes.repeat]
count = 1
""" + DRIFT_ONLY


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("embedded")
    (work / "plan.toml").write_text(PLAN)
    done = servediff("run", "plan.toml", "--out", "run", cwd=work)
    assert_started(work / "run")
    assert done.returncode == 0, done.stderr + done.stdout
    return work / "run"


def cells(root: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((root / "cells").glob("*.json"))}


def test_every_load_was_a_real_cold_process(run_dir: Path):
    loads = [json.loads(p.read_text()) for p in sorted((run_dir / "loads").glob("*.json"))]
    assert len(loads) == 4
    pids = set()
    for load in loads:
        (launch,) = load["launches"]
        pids.add(launch["pid"])
        assert launch["seconds_to_ready"] > 0
        assert launch["engine"]["versions"]["torch"]
        assert launch["host"] == "127.0.0.1"
        stop = launch["stop"]
        assert stop["died_before_stop"] is False
        assert stop["port_closed"] is True
        assert stop["signal"] == "SIGTERM" or stop["returncode"] == 0
        assert launch["weights_sha256"]["model.safetensors"]
        assert "servediff.engines.hf_server" in launch["command"]
    assert len(pids) == 4
    assert (run_dir / "logs" / "bs1-load1.log").read_text().count("ready on 127.0.0.1") == 1
    assert_all_stopped(run_dir)


def test_raw_records_are_consistent(run_dir: Path):
    for name, cell in cells(run_dir).items():
        assert [r["tag"] for r in cell["records"]] == cell["order"]
        assert sorted(cell["order"]) == sorted(TAGS)
        assert cell["wall_seconds"] >= cell["engine_seconds"] > 0
        assert cell["conditions"]["cpu_count"] >= 1
        for r in cell["records"]:
            assert r["status"] == "ok", (name, r["error"])
            assert r["token_ids"][0] == 1  # SmolLM2's BOS, <|im_start|>
            assert r["prefix"] == "bos:1"
            assert r["n_tokens"] == len(r["token_ids"]) == r["server_prompt_tokens"]
            assert len(r["token_logprobs"]) == r["n_scored"] == r["n_tokens"] - 1
            assert r["sum_nll"] == -math.fsum(r["token_logprobs"])
            assert all(lp <= 0 for lp in r["token_logprobs"])
        sizes = {r["batch_size"] for r in cell["records"]}
        assert sizes == ({1} if name.startswith("bs1") else {4, 1})


def test_analysis_matches_the_stored_per_text_numbers(run_dir: Path):
    summary = json.loads((run_dir / "summary.json").read_text())
    raw = cells(run_dir)

    def nll(name: str) -> dict[str, float]:
        return {r["tag"]: r["sum_nll"] for r in raw[name]["records"]}

    for arm in ("bs1", "bs4"):
        data = summary["arms"][arm]
        (pair,) = data["across_load"]
        a, b = nll(f"{arm}-load1-score"), nll(f"{arm}-load2-score")
        deltas = {t: b[t] - a[t] for t in TAGS}
        assert pair["moved"] == sum(d != 0 for d in deltas.values())
        assert pair["max_abs_delta"] == max(abs(d) for d in deltas.values())
        for within in data["within_load"]:
            base = nll(f"{arm}-load{within['load']}-score")
            rep = nll(f"{arm}-load{within['load']}-repeat-r1")
            assert within["moved"] == sum(rep[t] != base[t] for t in TAGS)
        for row in data["loads"]:
            recs = raw[f"{arm}-load{row['load']}-score"]["records"]
            expected = math.exp(math.fsum(r["sum_nll"] for r in recs)
                                / sum(r["n_scored"] for r in recs))
            assert row["perplexity"] == pytest.approx(expected, rel=1e-12)
        moved_any = any(p["moved"] for p in data["across_load"] + data["within_load"])
        assert (signature(run_dir, arm) == "bit-identical") == (not moved_any)
    shift = summary["arm_shifts"][0]
    one, four = nll("bs1-load1-score"), nll("bs4-load1-score")
    assert shift["moved"] == sum(one[t] != four[t] for t in TAGS)
    # The within-load comparison was between different batch compositions for bs4:
    # whatever moved is reported as within-load, never as bit-identical.
    for c1, c2 in combinations(["bs4-load1-score", "bs4-load1-repeat-r1"], 2):
        differ = any(nll(c1)[t] != nll(c2)[t] for t in TAGS)
        if differ:
            assert signature(run_dir, "bs4") == "within-load"


def test_rederive_scores_and_verify(run_dir: Path):
    derived = servediff("rederive", str(run_dir), "--json", cwd=run_dir.parent)
    assert derived.returncode == 0, derived.stderr
    assert json.loads(derived.stdout) == json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(x) for x in
            servediff("scores", str(run_dir), "--json", cwd=run_dir.parent).stdout.splitlines()]
    assert len(rows) == 4 * 2 * len(TAGS)
    assert {"arm", "load", "repeat", "tag", "token_ids", "sum_nll", "n_tokens"} <= set(rows[0])
    assert servediff("verify", str(run_dir), cwd=run_dir.parent).returncode == 0
    report = (run_dir / "report.md").read_text()
    assert "## Not tested" in report and "bs1" in report and "bs4" in report


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_interrupted_run_resumes_without_redoing_cells(tmp_path: Path, sig: signal.Signals):
    # After the first cell, a second cell, a stop, a cold start and two cells are left to
    # do (about 12 s of engine work on an idle core): the signal lands mid-run even when the
    # machine is so busy that this test is not scheduled for several seconds.
    one_arm = PLAN.replace("[arms.bs4]\noptions = { batch_size = 4 }\n", "")
    (tmp_path / "plan.toml").write_text(one_arm)
    first = tmp_path / "run" / "cells" / "bs1-load1-score.json"
    with servediff_running("run", "plan.toml", "--out", "run", cwd=tmp_path,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
        deadline = time.monotonic() + 300
        while not first.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert first.exists(), proc.stderr.read() if proc.stderr else ""
        assert proc.poll() is None, "the run finished before it could be interrupted"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "to resume" in err and "Traceback" not in err
    kept = first.read_bytes()
    load = json.loads((tmp_path / "run" / "loads" / "bs1-load1.json").read_text())
    assert load["launches"][0]["stop"]["port_closed"] is True
    done = servediff("run", "plan.toml", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert first.read_bytes() == kept
    names = sorted(p.stem for p in (tmp_path / "run" / "cells").glob("*.json"))
    assert names == sorted(f"bs1-load{n}-{c}" for n in (1, 2) for c in ("score", "repeat-r1"))
    assert signature(tmp_path / "run", "bs1") != "not measured"
    # Resumed under a changed plan: refused with the difference, nothing run.
    (tmp_path / "plan.toml").write_text(one_arm.replace("loads_per_arm = 2", "loads_per_arm = 3"))
    refused = servediff("run", "plan.toml", "--out", "run", cwd=tmp_path)
    assert refused.returncode == 2
    assert "locked under another plan" in refused.stderr
    assert '"loads_per_arm": 3' in refused.stderr


def test_engine_killed_mid_load_is_recorded_and_the_run_goes_on(tmp_path: Path):
    one_arm = PLAN.replace("[arms.bs4]\noptions = { batch_size = 4 }\n", "")
    (tmp_path / "plan.toml").write_text(one_arm)
    load_file = tmp_path / "run" / "loads" / "bs1-load1.json"
    with servediff_running("run", "plan.toml", "--out", "run", cwd=tmp_path) as proc:
        deadline = time.monotonic() + 300
        pid = None
        while time.monotonic() < deadline and proc.poll() is None:
            if load_file.exists():
                launch = json.loads(load_file.read_text())["launches"][0]
                if launch["seconds_to_ready"] is not None:
                    pid = launch["pid"]
                    break
            time.sleep(0.05)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    launch = json.loads(load_file.read_text())["launches"][0]
    assert launch["stop"]["died_before_stop"] is True
    assert launch["stop"]["group_gone"] is True
    assert launch["stop"]["signal"] == "SIGKILL"
    assert launch["error"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failed_launches"][0]["died_before_stop"] is True
    # the run restarted the arm for the cells the death left out, and went on
    record = json.loads(load_file.read_text())
    assert len(record["launches"]) == 2
    assert record["launches"][1]["stop"]["died_before_stop"] is False
    assert len(list((tmp_path / "run" / "cells").glob("*.json"))) == 4
    assert servediff("verify", "run", cwd=tmp_path).returncode == 0


def test_external_endpoint_is_scored_but_never_reloaded(tmp_path: Path):
    from servediff.engines.process import free_port, port_open
    from servediff.models import smollm2_dir

    model, _ = smollm2_dir(lambda message: None)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "servediff.engines.hf_server", "--model",
                               str(model), "--port", str(port)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not port_open("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.2)
        (tmp_path / "plan.toml").write_text(
            f'engine = "openai"\nmodel = "served"\nbase_url = "http://127.0.0.1:{port}"\n'
            "loads_per_arm = 1\n[scoring]\nprefix = 1\n[arms.plain]\n"
            f"[corpus]\ntags = {json.dumps(TAGS[:2])}\n" + DRIFT_ONLY
        )
        done = servediff("run", "plan.toml", "--out", "run", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert server.poll() is None  # servediff did not stop a server it did not start
    finally:
        server.terminate()
        server.wait(timeout=30)
    launch = json.loads((tmp_path / "run" / "loads" / "plain-load1.json").read_text())
    assert launch["launches"][0]["external"] is True and launch["launches"][0]["stop"] is None
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["arms"]["plain"]["loads"][0]["ok"] == 2
    assert any(gap["kind"] == "external endpoint" for gap in summary["gaps"])
    assert "servediff cannot reload a server it did not start" in \
        (tmp_path / "run" / "report.md").read_text()


def test_scoring_batch_size_within_one_load_is_named(tmp_path: Path):
    tags = ["json-event", "prose-harbour", "code-python-lru", "de-prose-wetter",
            "prose-short-storm", "maths-proof", "list-steps", "csv-short"]
    (tmp_path / "plan.toml").write_text(
        'engine = "transformers"\nmodel = "smollm2"\nloads_per_arm = 1\n'
        '[engine_options]\ndevice = "cpu"\n[arms.a]\n'
        f"[corpus]\ntags = {json.dumps(tags)}\n"
        "[probes.repeat]\ncount = 1\nbatch_sizes = [8]\n" + DRIFT_ONLY)
    done = servediff("run", "plan.toml", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    arm = summary["arms"]["a"]

    def nll(name: str) -> dict[str, float]:
        cell = json.loads((run / "cells" / f"{name}.json").read_text())
        return {r["tag"]: r["sum_nll"] for r in cell["records"]}

    one, eight, again = nll("a-load1-score"), nll("a-load1-batch-b8"), nll("a-load1-repeat-r1")
    assert {r["batch_size"] for r in json.loads(
        (run / "cells" / "a-load1-batch-b8.json").read_text())["records"]} == {8}
    moved = sum(one[t] != eight[t] for t in tags)
    assert arm["batch_size"][0]["moved"] == moved
    assert arm["within_load"][0]["moved"] == sum(one[t] != again[t] for t in tags)
    if moved and arm["within_load"][0]["moved"] == 0:
        assert signature(run, "a") == "batch-composition (scoring batch size 1 vs 8)"
    elif not moved:
        assert signature(run, "a") == "bit-identical"


def test_concurrency_grid_scores_and_generates(tmp_path: Path):
    from tests.integration.engines import CONCURRENCY, check_concurrency_table, probes_off

    (tmp_path / "plan.toml").write_text(
        'engine = "transformers"\nmodel = "smollm2"\nloads_per_arm = 1\n'
        '[engine_options]\ndevice = "cpu"\n[arms.a]\n[corpus]\ntags = ["json-event"]\n'
        "[probes.repeat]\ncount = 0\n" + CONCURRENCY
        + probes_off("generate", "speed", "sweep", "prefix"))
    done = servediff("run", "plan.toml", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    summary = check_concurrency_table(run, "a", ["score", "generate"])
    cell = json.loads((run / "cells" / "a-load1-concurrency.json").read_text())
    score = [g for g in cell["groups"] if g["kind"] == "score"]
    # a scoring response is the prompt's logprobs: one per prompt token after the first
    assert {len(r["logprobs"]) for g in score for r in g["responses"]} == {63, 255}
    sig = signature(run, "a")
    conc = summary["arms"]["a"]["concurrency"]
    assert ("batch-composition" in sig) == (conc["control_ok"] and conc["batch_composition"])
    assert "| score | 256 |" in (run / "report.md").read_text()
    assert_all_stopped(run)
