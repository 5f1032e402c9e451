"""Real SGLang (CPU) processes, started and stopped by servediff: the engine of the case
servediff was built for. Three arms: `stock`, `noradix` (--disable-radix-cache) and
`deterministic` (--enable-deterministic-inference, which SGLang refuses on the CPU), in
float32 with a 1,024-token context; two cold loads with a reordered repeat each, then a
cost load with speed, prefix reuse and a survival sweep to the context and past it.

SGLang is set up once in its own virtual environment by scripts/setup-sglang-cpu.sh (cached
under $SERVEDIFF_CACHE/engines), with servediff's import-only `sgl_kernel` stand-in; the
plan uses the adapter's default launch, so its CPU path and KV pool are servediff's own.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.claims import prefix_of
from tests.integration.engines import (
    TAGS,
    assert_all_stopped,
    check_rows_valid,
    check_summary_against_rows,
    check_sweep,
    claims,
    rows,
    servediff,
    signature,
    summary_of,
)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CONTEXT = 1024
REFUSAL = ("ValueError: Currently only ['ascend', 'fa3', 'fa4', 'flashinfer', 'intel_xpu', "
           "'triton'] attention backends are supported for deterministic inference, but you "
           "explicitly specified 'torch_native'.")


PLAN = ROOT / "docs" / "examples" / "sglang-cpu.toml"


@pytest.fixture(scope="module")
def sglang_run(tmp_path_factory: pytest.TempPathFactory, sglang_python: Path) -> Path:
    """docs/examples/sglang-cpu.toml, the README's SGLang run, as it is committed."""
    work = tmp_path_factory.mktemp("sglang")
    plan = tomllib.loads(PLAN.read_text())
    assert plan["corpus"]["tags"] == TAGS and plan["probes"]["repeat"]["count"] == 1
    done = servediff("run", str(PLAN), "--out", str(work / "run"), cwd=work)
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    return work / "run"


def launches(run: Path, name: str) -> list[dict]:
    return json.loads((run / "loads" / f"{name}.json").read_text())["launches"]


def test_sglang_drift_against_the_embedded_engine(sglang_run: Path, hf_run: Path):
    check_rows_valid(sglang_run)
    for arm in ("stock", "noradix"):
        summary = check_summary_against_rows(sglang_run, arm)
        assert summary["arms"][arm]["within_load"], arm  # the reordered repeat
        report = (sglang_run / "report.md").read_text()
        assert f"### Arm `{arm}`: {signature(sglang_run, arm)}" in report
        (launch,) = launches(sglang_run, f"{arm}-load1")
        # drift loads isolate the radix cache; the ready check found nothing cached
        assert "--disable-radix-cache" in launch["command"]
        assert launch["first_request_cached_tokens"] == 0
        assert launch["engine"]["version"]["sglang"] == "0.5.23"
        assert launch["engine"]["max_model_len"] == CONTEXT
        for part in ("--device", "cpu", "--attention-backend", "torch_native",
                     "--disable-cuda-graph", "--sleep-on-idle"):
            assert part in launch["command"], part
        assert launch["env_diff"]["SGLANG_USE_CPU_ENGINE"] == "1"
        assert any("import-only stand-in" in n for n in launch["notes"]), launch["notes"]
        # the KV pool servediff sized: 1 GiB of float32 KV for SmolLM2 (46,080 bytes a token)
        assert launch["capacity"]["kv_tokens"] == (1 << 30) // 46080
        assert any("--max-total-tokens 23301" in n for n in launch["notes"])
    # per text, on the same token ids, SGLang float32 agrees with the embedded engine's
    # float32 within 1e-3 relative (measured 2026-12-02: at most REL, see the assertion)
    hf = rows(hf_run, "fp32", 1)
    stock = rows(sglang_run, "stock", 1)
    worst = 0.0
    for tag in TAGS:
        assert stock[tag]["token_ids"] == hf[tag]["token_ids"], tag
        worst = max(worst, abs(stock[tag]["sum_nll"] / hf[tag]["sum_nll"] - 1))
    assert worst <= 1e-3, worst
    print(f"SGLang vs embedded float32, worst per-text relative NLL difference: {worst:.2e}")


def test_sglang_costs_prefix_reuse_and_survival(sglang_run: Path):
    summary = summary_of(sglang_run)
    for arm in ("stock", "noradix"):
        # SGLang's own limit: a prompt of at most context - 7 tokens (1,017 of 1,024)
        check_sweep(sglang_run, arm, CONTEXT, limit=CONTEXT - 7)
        (cost,) = launches(sglang_run, f"{arm}-cost1")
        assert cost["capacity"]["kv_tokens"] == (1 << 30) // 46080
        assert cost["capacity"]["radix_cache"] is (arm == "stock")
    prefix = {arm: prefix_of(summary, arm) for arm in ("stock", "noradix")}
    assert prefix["stock"] and prefix["noradix"]
    assert (prefix["stock"].later_cached_tokens or 0) > 0
    assert prefix["noradix"].later_cached_tokens == 0
    lost = [c for c in claims(sglang_run, "noradix", "cost") if "prefix reuse lost" in c]
    assert lost, claims(sglang_run, "noradix", "cost")
    assert_all_stopped(sglang_run)


def test_sglang_refuses_deterministic_inference_on_the_cpu(sglang_run: Path):
    summary = summary_of(sglang_run)
    (refused,) = summary.did_not_start
    assert (refused.arm, refused.message) == ("deterministic", REFUSAL)
    tries = launches(sglang_run, "deterministic-load1")
    assert len(tries) == 2 and all(t["engine_refusal"] == REFUSAL for t in tries)
    assert all(t["seconds_to_ready"] is None and t["stop"]["died_before_stop"] for t in tries)
    # no other load of it was started; the other arms ran to the end
    assert sorted(p.stem for p in (sglang_run / "loads").glob("deterministic-*")) == [
        "deterministic-load1"]
    assert not list((sglang_run / "cells").glob("deterministic-*"))
    assert (sglang_run / "cells" / "noradix-cost1-sweep.json").exists()
    # nothing of it was measured: no gain of it either (the baseline's refused 1,023-token
    # prompts are a survival finding of the baseline, not a gain of an arm that never ran)
    assert claims(sglang_run, "deterministic", "gain") == []
    (text,) = [c for c in claims(sglang_run, "deterministic", "cost") if "did not start" in c]
    assert "this configuration does not exist on this stack" in text
    report = (sglang_run / "report.md").read_text()
    assert "`deterministic` did not start: the engine refused it at all 2 launches" in \
        report.split("## What broke")[1].split("\n## ")[0]
