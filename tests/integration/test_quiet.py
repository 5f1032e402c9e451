"""The quiet box: a busy machine refuses a cost load, or marks its claims; it never yields a cost.

A busy process, started by this test beside a real run of the embedded
engine, uses a whole CPU core. The gate before the first cost load must see
it: by default servediff refuses with a one-line reason (exit 3) and keeps
the drift cells already measured; with `quiet.action = "mark"` the run goes
on and every speed claim says it was measured on a busy machine. (That a
quiet machine gives an ordinary verdict is checked on fixture bundles in
tests/unit/test_quiet.py and on the same kind of plan run on a quiet H200 in
tests/unit/test_validation_bundles.py: the machine that runs these tests may
not be quiet.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.engines import probes_off, servediff, summary_of

pytestmark = pytest.mark.integration

PLAN = """
engine = "transformers"
model = "smollm2"
loads_per_arm = 1
cost_loads_per_arm = 2
[engine_options]
device = "cpu"
max_model_len = 1024
[arms.sdpa]
options = { attn_implementation = "sdpa" }
[arms.eager]
options = { attn_implementation = "eager" }
[corpus]
tags = ["json-event"]
[probes.repeat]
count = 0
[probes.speed]
prompt_tokens = [128]
max_tokens = 8
replicates = 3
levels = [1]
[quiet]
window_s = 2
wait_s = 3
max_foreign_cpu = 0.5
""" + probes_off("concurrency", "generate", "sweep", "prefix")


def hog(nice: int) -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-c", f"import os\nos.nice({nice})\nwhile True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture()
def busy() -> Iterator[None]:
    """A process that spins on a whole core, at the priority of the tests."""
    yield from hog(0)


@pytest.fixture()
def busy_in_the_gaps() -> Iterator[None]:
    """The same at the lowest priority: it takes a whole core whenever the machine has one to
    spare, and next to nothing from the other test workers when they keep the machine busy
    themselves; either way the gate sees other processes use the CPU. (The mark-mode run
    below lasts minutes; at full priority this hog took a core from the others all along.)"""
    yield from hog(19)


def test_a_busy_machine_refuses_the_cost_load_and_keeps_the_cells(tmp_path: Path, busy: None):
    (tmp_path / "plan.toml").write_text(PLAN)
    done = servediff("run", "plan.toml", "--out", "run", cwd=tmp_path)
    assert done.returncode == 3, done.stderr[-2000:]
    error = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and "not quiet enough for cost load 1" in error[0]
    # the refusal names the processes that use the CPU, the busiest three: the hog, or on a
    # machine busier still (two `yes` beside the suite), others
    assert re.search(r"other processes use \d+\.\d\d CPU cores \(limit 0\.5\): "
                     r"[^,]+ \(pid \d+\) \d+\.\d\d", error[0]), error[0]
    # the drift loads ran (the gate is for cost loads) and their cells are kept
    cells = sorted(p.stem for p in (tmp_path / "run" / "cells").glob("*.json"))
    assert cells == ["eager-load1-score", "sdpa-load1-score"]
    # the refusal is evidence: the first cost load's record keeps the gate, and no launch
    loads = sorted(p.stem for p in (tmp_path / "run" / "loads").glob("*-cost*.json"))
    assert loads == ["sdpa-cost1"]
    record = json.loads((tmp_path / "run" / "loads" / "sdpa-cost1.json").read_text())
    assert record["launches"] == [] and not record["refused"]["quiet"]
    assert record["refused"]["reasons"][0].startswith("other processes use")
    assert servediff("report", "run", cwd=tmp_path).returncode == 0
    report = (tmp_path / "run" / "report.md").read_text()
    assert "sdpa cost load 1: not measured, the machine was not quiet (other processes" in report
    assert "eager: 0 of 2 planned cost loads have a cell" in report


def test_mark_mode_goes_on_and_no_speed_claim_is_a_cost(tmp_path: Path,
                                                        busy_in_the_gaps: None):
    (tmp_path / "plan.toml").write_text(PLAN.replace("wait_s = 3", 'wait_s = 3\naction = "mark"')
                                  .replace("cost_loads_per_arm = 2", "cost_loads_per_arm = 1"))
    done = servediff("run", "plan.toml", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    # the drift table is shown as soon as the drift loads are done, before any cost load
    early = done.stderr.index("the cost loads come next")
    assert done.stderr.index("Drift per text") < early < done.stderr.index("cost load 1")
    summary = summary_of(tmp_path / "run")
    (pair,) = summary.verdict.pairs
    speed = [c for c in pair.claims if c.topic == "speed"]
    assert speed and all(c.kind == "note" and c.comparison.busy for c in speed)
    assert summary.conditions["eager"].gates_not_quiet == 1
    report = (tmp_path / "run" / "report.md").read_text()
    assert "measured on a busy machine" in report
    assert "Conditions per arm" in report
