"""A new probe is one file plus its registry line: a toy probe, run on a real engine.

tests/probes/toy.py holds the probe (settings, cells, measurement, analysis,
report lines); registering it is the one line in `probes.PROBES`. A plan
with it then runs through the real runner on the toy engine's real
processes, and the probe shows in `servediff init`'s plan, in summary.json
and in report.md, with nothing else changed.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from servediff import probes
from servediff.cli.init import init
from servediff.derived import write_derived
from servediff.engines import registry
from servediff.plan import load_plan_file, resolve_plan
from servediff.runner import Runner, SilentObserver
from tests.engines import toy as toy_engine
from tests.integration.engines import assert_all_stopped, probes_off
from tests.probes import toy

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_a_toy_probe_in_one_file_plus_a_registry_line(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(registry.ENGINES, "toy", toy_engine.ENTRY)
    monkeypatch.setitem(probes.PROBES, "tokenize", toy.ENTRY)  # the registry line

    # `servediff init` writes the probe's table, with its description, and the plan it
    # writes validates with it
    target = tmp_path / "new.toml"
    result = CliRunner().invoke(init, ["transformers", "smollm2", "--out", str(target),
                                       "--size", "full"])
    assert result.exit_code == 0, result.output
    text = target.read_text()
    assert f"# {toy.Tokenize.description}\n[probes.tokenize]\nenabled = false\nrequests = 3" \
        in text
    assert load_plan_file(target)[0].probes.get(toy.TokenizeSettings).requests == 3

    model = tmp_path / "toy-model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"toy")
    raw = {"engine": "toy", "model": "toy-model", "loads_per_arm": 2,
           "arms": {"a": {}, "b": {}}, "corpus": {"tags": ["json-event"]},
           "launch": {"env": {"PYTHONPATH": str(ROOT)}}}
    raw.update(tomllib.loads(probes_off("concurrency", "generate", "speed", "sweep",
                                        "prefix")))
    raw["probes"]["repeat"] = {"count": 0}
    raw["probes"]["tokenize"] = {"enabled": True, "requests": 4}
    plan, corpus = resolve_plan(raw, "toy.toml", tmp_path)
    run = tmp_path / "run"
    Runner(plan, corpus, run, tmp_path, SilentObserver()).run()
    assert sorted(p.stem for p in (run / "cells").glob("*.json")) == sorted(
        f"{arm}-load{n}-{probe}" for arm in "ab" for n in (1, 2)
        for probe in ("score", "tokenize"))
    cell = json.loads((run / "cells" / "a-load2-tokenize.json").read_text())
    assert [row["index"] for row in cell["data"]] == [0, 1, 2, 3]
    assert_all_stopped(run)

    write_derived(run)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["probe_findings"] == {"tokenize": {"arms": {
        arm: {"requests": 8, "errors": 0, "distinct": 1,
              "cells": [f"cells/{arm}-load{n}-tokenize.json" for n in (1, 2)]}
        for arm in "ab"}}}
    # the arms answer alike: the probe's claim for the pair says so, and is no cost
    claims = [c for c in summary["verdict"]["pairs"][0]["claims"] if c["topic"] == "probe"]
    assert [(c["kind"], c["arm"]) for c in claims] == [("within noise", "b")]
    assert "tokenize" not in summary["untested"]
    report = (run / "report.md").read_text()
    assert "## Tokenizer answers to one text, repeated\n\n- `a`: 1 distinct tokenization(s) " \
        "over 8 request(s), 0 error(s)\n" in report
    assert "tokenize one text 4 times per drift load" in report


def test_a_registered_probe_left_off_is_named_as_not_tested(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    from tests.engines.fake import FakeLauncher
    from tests.unit.test_runner import TEXTS, plan

    monkeypatch.setitem(probes.PROBES, "tokenize", toy.ENTRY)
    launcher = FakeLauncher()
    run = tmp_path / "run"
    Runner(plan(tmp_path), TEXTS, run, tmp_path, SilentObserver(), launcher=launcher,
           clients=launcher.client).run()
    write_derived(run)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["untested"]["tokenize"] == {"reason": "disabled"}
    assert summary["probe_findings"] == {}
    assert "- `tokenize`: tokenizer answers to one text, repeated: disabled in the plan" in \
        (run / "report.md").read_text()


def test_the_toy_probe_s_claim_reaches_the_verdict_and_what_to_ship(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The probe's `compare` (in its one file) says a cost: an arm whose engine answers one
    text with two tokenizations. The terminal's end-of-run view, report.md's verdict, What
    to ship and the factor attribution list it, from nothing but the probe's file and its
    registry line (the engine is the toy server with its flaky-tokenizer flag)."""
    from rich.console import Console

    from servediff.analysis.findings import Summary
    from servediff.report.table import run_view

    monkeypatch.setitem(registry.ENGINES, "toy", toy_engine.ENTRY)
    monkeypatch.setitem(probes.PROBES, "tokenize", toy.ENTRY)  # the registry line
    model = tmp_path / "toy-model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"toy")
    raw = {"engine": "toy", "model": "toy-model", "loads_per_arm": 2,
           "factors": {"flaky": {"args": ["--flaky-tokenize", toy.TEXT]}},
           "corpus": {"tags": ["json-event"]},
           "launch": {"env": {"PYTHONPATH": str(ROOT)}}}
    raw.update(tomllib.loads(probes_off("concurrency", "generate", "speed", "sweep",
                                        "prefix")))
    raw["probes"]["repeat"] = {"count": 0}
    raw["probes"]["tokenize"] = {"enabled": True, "requests": 4}
    raw["ship"] = {"require": ["across loads"]}
    plan, corpus = resolve_plan(raw, "toy.toml", tmp_path)
    run = tmp_path / "run"
    Runner(plan, corpus, run, tmp_path, SilentObserver()).run()
    write_derived(run)

    said = ("`flaky` gave 2 distinct tokenization(s) of one text over 8 request(s), "
            "`baseline` 1")
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    claims = [c for c in summary.verdict.pairs[0].claims if c.topic == "probe"]
    assert [(c.kind, c.probe, c.arm, c.baseline) for c in claims] == [
        ("cost", "tokenize", "flaky", "baseline")]
    assert claims[0].evidence == [f"cells/{arm}-load{n}-tokenize.json"
                                  for arm in ("baseline", "flaky") for n in (1, 2)]
    report = (run / "report.md").read_text()
    ship = report[report.index("## What to ship"):report.index("## Which factor")]
    assert "Ship the baseline" in ship
    assert f"`flaky`: not needed for reproducibility here; on top of `baseline` it would " \
        f"cost:\n- {said}" in ship
    assert "`flaky` changes tokenizer answers to one text, repeated (always)" in report
    verdict = report[report.index("### Verdict per arm pair"):]
    assert f"- cost: {said}" in verdict
    console = Console(width=400, record=True)
    console.print(run_view(summary))
    terminal = console.export_text()
    assert said in terminal and "What to ship" in terminal
