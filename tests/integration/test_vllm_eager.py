"""Real vLLM (CPU), one eager arm: one drift load with the concurrency grid, then one cost
load (speed, the context sweep, prefix reuse); each test reads that one run.

A module of its own, so that another test worker runs it beside test_vllm_reload.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from servediff.models import smollm2_dir
from tests import hubcache
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


# The model by a hub id, found in a hub cache laid out here offline (a ref, a commit, a
# snapshot of links to blobs): the converted SmolLM2's files.
HUB_ID = "servediff-test/smollm2-135m"


@pytest.fixture(scope="module")
def hub_commit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The commit of HUB_ID in a hub cache that this worker's servediff runs read."""
    folder, _ = smollm2_dir(lambda _: None)
    cache = tmp_path_factory.mktemp("hub")
    commit = hubcache.build(cache, HUB_ID, {p.name: p for p in folder.iterdir()
                                            if p.suffix in (".json", ".safetensors")})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_CACHE", str(cache))
        yield commit


@pytest.fixture(scope="module")
def vllm_eager_run(tmp_path_factory: pytest.TempPathFactory, vllm_python: Path,
                   hub_commit: str) -> Path:
    """One eager vLLM arm, read by the concurrency-grid and cost tests: one drift load with
    the concurrency grid, then one cost load (one launch each, instead of a run apiece). The
    plan names the model by its hub id."""
    work = tmp_path_factory.mktemp("vllm-eager")
    plan = vllm_plan(vllm_python, work).replace("loads_per_arm = 2",
                                                "loads_per_arm = 1\ncost_loads_per_arm = 1")
    plan = plan.replace('model = "smollm2"', f'model = "{HUB_ID}"')
    plan = plan.replace("[arms.compiled]\n", "").replace("[probes.repeat]\ncount = 1\n",
                                                         "[probes.repeat]\ncount = 0\n")
    plan = plan.replace(CORPUS, '[corpus]\ntags = ["prose-harbour"]\n')
    # the speed probe in steady mode: 4 streamed requests a replicate, 1 and 2 in flight
    cost = COST.replace("levels = [1, 2]\n", 'levels = [1, 2]\nmode = "steady"\nrequests = 4\n', 1)
    plan = plan.replace(CONC_OFF, CONCURRENCY).replace(probes_off("speed", "sweep", "prefix"),
                                                       "") + cost
    return run_plan(work, plan)


def test_vllm_concurrency_grid(vllm_eager_run: Path):
    run = vllm_eager_run
    summary = check_concurrency_table(run, "eager", ["score", "generate"])
    assert_all_stopped(run)
    conc = summary["arms"]["eager"]["concurrency"]
    assert ("batch-composition" in signature(run, "eager")) == \
        (conc["control_ok"] and conc["batch_composition"])



def test_a_hub_id_is_served_from_its_cached_snapshot_named_by_commit_and_hashes(
        vllm_eager_run: Path, hub_commit: str):
    run = vllm_eager_run
    snapshot = None
    for name in ("eager-load1", "eager-cost1"):
        (launch,) = json.loads((run / "loads" / f"{name}.json").read_text())["launches"]
        source = launch["model_source"]
        assert (source["kind"], source["hub_repo"], source["hub_commit"]) == \
            ("hub", HUB_ID, hub_commit), name
        snapshot = Path(source["served"])
        assert snapshot.name == hub_commit and str(snapshot) in launch["command"]
        # the weights' sha256, hashed from the snapshot: the LFS blob each file links to
        weights = launch["weights_sha256"]
        assert weights and all(
            (snapshot / f).resolve().name == sha for f, sha in weights.items()), weights
    summary = json.loads((run / "summary.json").read_text())
    assert summary["model"] == HUB_ID


def test_vllm_cost_protocol(vllm_eager_run: Path):
    run = vllm_eager_run
    summary = check_sweep(run, "eager", 2048)
    cost = json.loads((run / "loads" / "eager-cost1.json").read_text())["launches"][0]
    # the cost load runs vLLM as the arm configures it: no cache flag added
    assert "--no-enable-prefix-caching" not in cost["command"]
    assert summary["costs"]["eager"]["capacity"]["kv_tokens"] > 0
    # vLLM's prefix cache is on by default: later requests reuse the shared prefix
    assert summary["probe_findings"]["prefix"]["arms"]["eager"]["later_cached_tokens"] > 0
    # steady mode: every replicate streamed 4 requests of exactly 8 tokens, timed per token
    cell = json.loads((run / "cells" / "eager-cost1-speed.json").read_text())
    samples = [s for s in cell["speed"] if s["status"] == "ok"]
    assert len(samples) == len(cell["speed"]) == 2 * 4  # 2 levels, 1 warm-up + 3 replicates
    for s in samples:
        assert (s["mode"], s["requests"], s["generated"]) == ("steady", 4, 8), s
        assert 0 < s["itl_s"] < s["total_s"] and 0 < s["ttft_s"] < s["total_s"]
        assert s["achieved_prompt_tokens"] == 128
    per = {e["concurrency"]: e for e in summary["costs"]["eager"]["speed"]["per_length"]}
    assert set(per) == {1, 2} and all(e["mode"] == "steady" for e in per.values())
    assert all(len(e["itl_s"]["values"]) == 3 and e["throughput_tok_s"]["mean"] > 0
               for e in per.values())
