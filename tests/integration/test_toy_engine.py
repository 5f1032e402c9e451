"""A new engine is one file plus its registry line: a toy engine, started for real.

tests/engines/toy.py holds the adapter and the server; registering it is the
one line in `registry.ENGINES`. A plan on it then runs end to end through the
real runner, with real engine processes started and stopped on loopback.
"""

from __future__ import annotations

import json
import sys
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
    assert load["launches"][0]["engine"]["version"] == {"engine": "toy", "build": "1"}
    assert load["launches"][0]["command"][:3] == toy.ToyAdapter.default_command[:3]
    summary = summarize(read_evidence(run))
    assert {arm: d.signature.name for arm, d in summary.arms.items()} == {
        "a": "bit-identical", "b": "bit-identical"}
    assert summary.arms["a"].loads[0].ok == 2
    assert_all_stopped(run)


def test_an_arm_with_its_own_command_runs_another_build(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    """A second build of an engine behind a wrapper script: every load record of that arm
    names the wrapper's command and the build's version."""
    monkeypatch.setitem(registry.ENGINES, "toy", toy.ENTRY)
    (tmp_path / "toy-model").mkdir()
    wrapper = tmp_path / "toy-2.0"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m tests.engines.toy --build 2.0 "$@"\n')
    wrapper.chmod(0o755)
    raw = {"engine": "toy", "model": "toy-model", "loads_per_arm": 2,
           "arms": {"old": {}, "new": {"command": [str(wrapper), "--model", "{model}",
                                                   "--host", "{host}", "--port", "{port}"]}},
           "corpus": {"tags": ["json-event"]}, "launch": {"env": {"PYTHONPATH": str(ROOT)}}}
    raw.update(tomllib.loads(probes_off("concurrency", "speed", "sweep", "prefix",
                                        "generate")))
    plan, corpus = resolve_plan(raw, "toy.toml", tmp_path)
    Runner(plan, corpus, tmp_path / "run", tmp_path, SilentObserver()).run()
    run = tmp_path / "run"
    for arm, build in (("old", "1"), ("new", "2.0")):
        for n in (1, 2):
            load = json.loads((run / "loads" / f"{arm}-load{n}.json").read_text())
            assert [x["engine"]["version"]["build"] for x in load["launches"]] == [build]
            assert (load["launches"][0]["command"][0] == str(wrapper)) == (arm == "new")
    summary = summarize(read_evidence(run))
    assert summary.setup.arms["new"].command[0] == str(wrapper)
    assert "build=1" in summary.setup.engine_versions
    assert "build=2.0" in summary.setup.engine_versions
    assert_all_stopped(run)
