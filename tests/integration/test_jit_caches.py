"""Cold means cold: each load's JIT and autotune caches, with a real Inductor compile on the CPU.

Two arms of the embedded engine with `torch.compile` (Inductor on the CPU,
static shapes): `fresh` gives every load new, empty cache directories,
`shared` gives the arm's loads one set that they keep. The load records must
say so, and the directories must really be what they say: empty at the
start of every fresh load (and gone after it), filled by the first shared
load and found full by the second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.engines import DRIFT_ONLY, assert_all_stopped, run_plan, summary_of

pytestmark = pytest.mark.integration

PLAN = """
engine = "transformers"
model = "smollm2"
loads_per_arm = 2
[engine_options]
device = "cpu"
compile = "default"
[arms.fresh]
cache_policy = "fresh"
[arms.shared]
cache_policy = "shared"
[corpus]
tags = ["json-event"]
[probes.repeat]
count = 1
""" + DRIFT_ONLY


def caches(run: Path, name: str) -> list[dict]:
    (launch,) = json.loads((run / "loads" / f"{name}.json").read_text())["launches"]
    assert launch["error"] is None, launch["error"]
    return launch["caches"]


def test_fresh_loads_start_empty_and_shared_loads_reuse(tmp_path: Path):
    run = run_plan(tmp_path, PLAN)
    known = {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH"}
    for load in (1, 2):
        fresh = {c["env"]: c for c in caches(run, f"fresh-load{load}")}
        assert set(fresh) == known
        assert all(c["policy"] == "fresh" and c["empty_at_start"] for c in fresh.values())
        inductor = fresh["TORCHINDUCTOR_CACHE_DIR"]
        assert inductor["path"].endswith(f".jit/fresh-load{load}/torchinductor_cache_dir")
        # Inductor wrote its compiled kernels there; the directory went after the load
        assert inductor["bytes_after"] > 0 and inductor["removed"]
        assert not Path(inductor["path"]).exists()
    first = {c["env"]: c for c in caches(run, "shared-load1")}
    second = {c["env"]: c for c in caches(run, "shared-load2")}
    assert first["TORCHINDUCTOR_CACHE_DIR"]["path"] == second["TORCHINDUCTOR_CACHE_DIR"]["path"]
    assert first["TORCHINDUCTOR_CACHE_DIR"]["empty_at_start"] is True
    assert second["TORCHINDUCTOR_CACHE_DIR"]["empty_at_start"] is False
    assert second["TORCHINDUCTOR_CACHE_DIR"]["bytes_at_start"] == \
        first["TORCHINDUCTOR_CACHE_DIR"]["bytes_after"] > 0
    assert not second["TORCHINDUCTOR_CACHE_DIR"]["removed"]
    # the engine scored with the compiled forward pass, at a static, bucketed shape
    engine = json.loads((run / "loads" / "fresh-load1.json").read_text())["launches"][0]
    assert engine["engine"]["compile"] == "default"
    assert engine["engine"]["shapes"].startswith("static")
    summary = summary_of(run)
    assert summary.arms["fresh"].cache_policy == "fresh"
    assert summary.arms["fresh"].caches_empty_at_start == [True, True]
    assert summary.arms["shared"].cache_policy == "shared"
    assert summary.setup.arms["shared"].cache_policy == "shared"
    report = (run / "report.md").read_text()
    assert ("Caches: every load started with new, empty JIT and autotune caches, apart from "
            "any the plan keeps") in report
    assert "the loads shared their JIT and autotune caches (a warm restart)" in report
    # the caches are not evidence: nothing under .jit is in the manifest
    manifest = json.loads((run / "manifest.json").read_text())["files"]
    assert not [f for f in manifest if f.startswith(".jit")]
    assert_all_stopped(run)
