"""Real vLLM (CPU), a factor plan: which of two flags costs prefix reuse and which one
the KV pool. Factor `no_prefix` (`--no-enable-prefix-caching`) and factor `small_kv`
(`--num-gpu-blocks-override 24`, 24 blocks of 128 tokens instead of the 182 that 1 GiB
holds) make four arms. The loads are combined: each arm's one cold load scores one short text
and then measures prefix reuse, so the plan takes four vLLM starts, not eight. Prefix-reuse
loss must be attributed to `no_prefix` alone and the capacity cut to `small_kv` alone, in
every contrast that measured them, as with separate loads. (Combined loads need the
prefix cache set in the plan for both parts: on in `[engine_options]`, off in `no_prefix`.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff.report.ship import ship_lines
from tests.claims import prefix_of
from tests.integration.engines import (
    MARK_BUSY,
    assert_all_stopped,
    probes_off,
    run_plan,
    servediff,
    summary_of,
)

pytestmark = pytest.mark.integration

BLOCKS = 24


def factor_plan(python: Path, work: Path) -> str:
    (work / "tmp").mkdir(exist_ok=True)
    # eager: nothing to compile, so every launch shares one cache root (see vllm_plan)
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}",
               "--host", "{host}", "--port", "{port}", "--max-model-len", "2048",
               "--dtype", "float32", "--enforce-eager"]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(work / "vllm-cache"),
           "TMPDIR": str(work / "tmp")}
    return ('name = "vllm-factors"\nengine = "vllm"\nmodel = "smollm2"\n'
            'loads_per_arm = 1\ncost_loads_per_arm = 1\nloads = "combined"\n'
            "[engine_options]\nprefix_cache = true\n"
            f"[launch]\ncommand = {json.dumps(command)}\ncache_policy = \"shared\"\n"
            "env = { " + ", ".join(f'{k} = {json.dumps(v)}' for k, v in env.items()) + " }\n"
            "[factors.no_prefix]\noptions = { prefix_cache = false }\n"
            f'[factors.small_kv]\nargs = ["--num-gpu-blocks-override", "{BLOCKS}"]\n'
            '[corpus]\ntags = ["prose-short-storm"]\n[probes.repeat]\ncount = 0\n'
            "[probes.prefix]\nprefix_tokens = 400\nquestion_tokens = 16\nrequests = 3\n"
            + probes_off("concurrency", "generate", "speed", "sweep") + MARK_BUSY)


@pytest.fixture(scope="module")
def factors_run(tmp_path_factory: pytest.TempPathFactory, vllm_python: Path) -> Path:
    work = tmp_path_factory.mktemp("vllm-factors")
    return run_plan(work, factor_plan(vllm_python, work))


def test_prefix_loss_is_no_prefix_alone_and_the_kv_cut_small_kv_alone(factors_run: Path):
    run = factors_run
    assert_all_stopped(run)
    summary = summary_of(run)
    assert summary.factors is not None
    # the design's order (summary.json's keys are sorted)
    assert [a.arm for a in summary.factors.arms] == [
        "baseline", "no_prefix", "small_kv", "no_prefix+small_kv"]
    # what each arm's engine reported: vLLM's own pool and prefix-cache state
    costs = summary.costs
    full, cut = costs["baseline"].capacity.kv_tokens, costs["small_kv"].capacity.kv_tokens
    assert full is not None and cut == BLOCKS * 128 < full
    assert costs["no_prefix+small_kv"].capacity.kv_tokens == cut
    assert costs["no_prefix"].capacity.kv_tokens == full
    # one combined load per arm, its cost cells measured by its own launch
    assert sorted(p.name for p in (run / "loads").iterdir()) == sorted(
        f"{arm}-load1.json" for arm in summary.arms)
    assert summary.setup.loads == "combined"
    for arm in summary.arms:
        record = json.loads((run / "loads" / f"{arm}-load1.json").read_text())
        assert record["combined"] is True
        (launch,) = record["launches"]
        assert launch["capacity"]["prefix_caching"] is ("no_prefix" not in arm), arm
        cell = json.loads((run / "cells" / f"{arm}-cost1-prefix.json").read_text())
        assert (cell["load"], cell["phase"], cell["launch"]) == (1, "cost", 1)
        prefix = prefix_of(summary, arm)
        assert prefix is not None and prefix.later_cached_tokens is not None
        assert (prefix.later_cached_tokens > 0) is ("no_prefix" not in arm), arm
    effects = {(x.factor, x.property.topic, x.property.what or x.property.probe): x
               for x in summary.factors.attribution}
    for factor, topic, what in (("no_prefix", "probe", "prefix"),
                                ("small_kv", "capacity", "kv")):
        found = effects[factor, topic, what]
        assert found.effect == "always", found
        assert [c.changed for c in found.contrasts] == [True, True]
        assert found.claims and all(c.kind == "cost" for c in found.claims)
    for factor, topic, what in (("small_kv", "probe", "prefix"),
                                ("no_prefix", "capacity", "kv")):
        found = effects[factor, topic, what]
        assert found.effect == "never", found
        assert [c.changed for c in found.contrasts] == [False, False]
    # no drift regime was measured (one load, one text, no repeat, no concurrency): no
    # answer on what to ship, and each factor with what it costs
    lines = ship_lines(summary)
    assert lines[0].startswith("No answer on reproducibility"), lines[0]
    assert "`no_prefix`; on top of `baseline` it would cost:" in lines
    assert "`small_kv`; on top of `baseline` it would cost:" in lines
    report = (run / "report.md").read_text()
    assert "## Which factor changes what" in report
    assert "## What to ship" in report.split("## Which factor changes what")[0]
    # the answer re-derives like every number
    derived = servediff("rederive", str(run), "--json", cwd=run.parent)
    assert derived.returncode == 0, derived.stderr
    assert json.loads(derived.stdout) == json.loads((run / "summary.json").read_text())
