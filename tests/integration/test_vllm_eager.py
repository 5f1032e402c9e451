"""Real vLLM (CPU), one eager arm: one drift load with the concurrency grid, then one cost
load (speed, the context sweep, prefix reuse); each test reads that one run.

A module of its own, so that another test worker runs it beside test_vllm_reload.py.
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
    assert_all_stopped,
    check_concurrency_table,
    check_sweep,
    probes_off,
    run_plan,
    signature,
    vllm_plan,
)

pytestmark = pytest.mark.integration


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
