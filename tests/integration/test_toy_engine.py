"""A new engine is one file plus its registry line: a toy engine, started for real.

tests/engines/toy.py holds the adapter and the server; registering it is the
one line in `registry.ENGINES`. A plan on it then runs end to end through the
real runner, with real engine processes started and stopped on loopback.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence
from servediff.engines import registry
from servediff.plan import resolve_plan
from servediff.runner import Runner, SilentObserver
from tests.engines import toy
from tests.integration.engines import assert_all_stopped, probes_off

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_a_toy_engine_in_one_file_plus_a_registry_line(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(registry.ENGINES, "toy", toy.ENTRY)  # the registry line
    model = tmp_path / "toy-model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"toy")
    raw = {"engine": "toy", "model": "toy-model", "loads_per_arm": 2,
           "arms": {"a": {}, "b": {}}, "corpus": {"tags": ["json-event", "prose-harbour"]},
           "launch": {"env": {"PYTHONPATH": str(ROOT)}}}
    raw.update(tomllib.loads(probes_off("concurrency", "speed", "sweep", "prefix")))
    plan, corpus = resolve_plan(raw, "toy.toml", tmp_path)
    Runner(plan, corpus, tmp_path / "run", tmp_path, SilentObserver()).run()
    run = tmp_path / "run"
    assert sorted(p.stem for p in (run / "cells").glob("*.json")) == sorted(
        f"{arm}-load{n}-{probe}" for arm in "ab" for n in (1, 2)
        for probe in ("score", "repeat-r1", "generate"))
    load = json.loads((run / "loads" / "a-load1.json").read_text())
    assert load["launches"][0]["engine"]["version"] == {"engine": "toy"}
    assert load["launches"][0]["command"][:3] == toy.ToyAdapter.default_command[:3]
    summary = summarize(read_evidence(run))
    assert {arm: d.signature.name for arm, d in summary.arms.items()} == {
        "a": "bit-identical", "b": "bit-identical"}
    assert summary.arms["a"].loads[0].ok == 2
    assert_all_stopped(run)
