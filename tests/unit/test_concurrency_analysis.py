from __future__ import annotations

from pathlib import Path

from servediff.analysis.findings import ConcurrencyDrift
from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence
from servediff.derived import write_derived
from servediff.evidence import Record
from servediff.report.words import signature_meaning, signature_text
from tests.fixtures.bundles import cell, concurrency_cell, make_bundle

STABLE = ["h"] * 4


def score_cells(arm: str, load: int) -> list:
    return [cell(arm, load), cell(arm, load, "repeat", 1)]


def test_batch_composition_found_with_its_length_floor(tmp_path: Path):
    outcomes = {(128, 1): STABLE, (128, 2): STABLE, (128, 4): STABLE,
                (512, 1): STABLE, (512, 2): STABLE, (512, 4): ["h", "x", "x", "y"],
                (2048, 1): STABLE, (2048, 2): ["h", "z", "h", "h"], (2048, 4): STABLE}
    cells = score_cells("a", 1) + score_cells("a", 2)
    cells += [concurrency_cell("a", 1, outcomes), concurrency_cell("a", 2, {
        k: STABLE for k in outcomes})]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",),
                                                  concurrency=True)))
    arm = summary.arms["a"]
    conc = arm.concurrency
    assert conc.control_ok is True
    assert conc.first_drift.model_dump() == {"length": 512, "level": 4, "kinds": ["generate"]}
    assert signature_text(arm.signature) == \
        "batch-composition (greedy generations from 512 tokens at concurrency 4)"
    (finding,) = arm.signature.findings
    assert (finding.kind, finding.scope, finding.length, finding.level) == \
        ("batch-composition", "concurrency", 512, 4)
    # one class per scope (the tag), with its own fields and no other scope's
    assert isinstance(finding, ConcurrencyDrift)
    assert set(finding.model_dump()) == {"scope", "kind", "evidence", "count",
                                         "request_kinds", "length", "level"}
    assert finding.evidence == ["cells/a-load1-concurrency.json",
                                "cells/a-load2-concurrency.json"]
    grid = {(e.length, e.level): e for e in conc.table.cells}
    assert grid[(512, 4)].distinct == 3 and grid[(512, 4)].off_majority == 2
    assert grid[(512, 4)].off_control == 3  # x, x, y: not the control's h
    assert grid[(2048, 2)].distinct == 2 and grid[(2048, 2)].off_majority == 1
    assert grid[(128, 4)].distinct == 1 and grid[(128, 4)].off_majority == 0
    assert "concurrency" not in summary.untested
    root = tmp_path
    write_derived(root)
    report = (root / "report.md").read_text()
    assert "| generate | 512 | 1 | 1 | 3 (3 off) |" in report
    assert "| request | prompt tokens | c=1 (control) | c=2 | c=4 |" in report


def test_a_level_that_agrees_with_itself_but_not_with_the_control_drifts(tmp_path: Path):
    # every row of a batch computed alike, and unlike the request sent alone
    outcomes = {(256, 1): STABLE, (256, 2): ["w"] * 4, (256, 4): STABLE}
    cells = [*score_cells("a", 1), concurrency_cell("a", 1, outcomes)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",), loads=1,
                                                  concurrency=True)))
    conc = summary.arms["a"].concurrency
    grid = {(e.length, e.level): e for e in conc.table.cells}
    assert (grid[(256, 2)].distinct, grid[(256, 2)].off_majority,
            grid[(256, 2)].off_control) == (2, 0, 4)
    assert (grid[(256, 4)].distinct, grid[(256, 4)].off_control) == (1, 0)
    assert conc.batch_composition and conc.first_drift.level == 2
    assert summary.arms["a"].signature.name != "bit-identical"


def test_failed_control_is_named_before_anything_else(tmp_path: Path):
    outcomes = {(256, 1): ["h", "h", "q", "h"], (256, 2): ["h", "k", "h", "h"]}
    cells = [*score_cells("a", 1), concurrency_cell("a", 1, outcomes)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",), loads=1,
                                                  concurrency=True)))
    arm = summary.arms["a"]
    assert arm.concurrency.control_ok is False
    assert signature_text(arm.signature) == \
        "non-deterministic alone (concurrency-1 control failed)"
    assert (arm.signature.findings[0].count, arm.signature.findings[0].of) == (1, 1)


def test_errors_are_counted_not_compared(tmp_path: Path):
    outcomes = {(256, 1): STABLE, (256, 2): ["h", "ERR", "h", "h"]}
    cells = [*score_cells("a", 1), concurrency_cell("a", 1, outcomes)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",), loads=1,
                                                  concurrency=True)))
    grid = summary.arms["a"].concurrency.table.cells
    band = grid[1].off_majority_ci95
    assert grid[1].model_dump() == {"kind": "generate", "length": 256, "level": 2, "distinct": 1,
                       "off_majority": 0, "requests": 4, "errors": 1,
                       "off_majority_ci95": [0.0, band[1]], "off_control": 0}
    assert grid[1].off_majority_ci95[1] > 0.5  # 0 of 3: the interval stays wide
    assert summary.arms["a"].signature.name == "bit-identical"


def test_generation_that_differs_between_loads_is_across_load(tmp_path: Path):
    cells = score_cells("a", 1) + score_cells("a", 2)
    cells += [concurrency_cell("a", 1, {(256, 1): STABLE, (256, 2): STABLE}),
              concurrency_cell("a", 2, {(256, 1): ["g"] * 4, (256, 2): ["g"] * 4})]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",),
                                                  concurrency=True)))
    assert signature_text(summary.arms["a"].signature) == "across-load only"
    assert [x.model_dump() for x in summary.arms["a"].concurrency.across_loads] == [
        {"kind": "generate", "length": 256, "loads": [1, 2], "distinct": 2}]


def batch_cell(shift: float):
    c = cell("a", 1, "batch", batch_size=8, shifts={"beta": shift})
    c.records = [Record(**{**r.model_dump(), "batch_size": 8}) for r in c.records]
    return c


def test_scoring_batch_size_is_named_batch_composition(tmp_path: Path):
    cells = [*score_cells("a", 1), batch_cell(2e-05)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",), loads=1)))
    arm = summary.arms["a"]
    assert arm.batch_size[0].moved == 1 and arm.batch_size[0].batch_size == 8
    assert signature_text(arm.signature) == "batch-composition (scoring batch size 1 vs 8)"


def test_batch_size_without_effect_stays_bit_identical(tmp_path: Path):
    cells = [*score_cells("a", 1), batch_cell(0.0)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",), loads=1)))
    assert summary.arms["a"].signature.name == "bit-identical"


def generate_cell(arm: str, load: int, outputs: dict[str, list[list[int]]]):
    """A generate cell: per tag, the token ids each repeat produced."""
    from servediff.evidence import Cell, Group, Response
    from servediff.probes.requests import response_hash
    from tests.fixtures.bundles import conditions

    groups = [Group(tag=tag, length=8, level=1, max_tokens=3, prompt_sha256="p" * 64,
                    responses=[Response(index=i, status="ok", token_ids=ids,
                                        logprobs=[-0.5] * len(ids), text=str(ids),
                                        hash=response_hash(ids, [-0.5] * len(ids)))
                               for i, ids in enumerate(runs)])
              for tag, runs in outputs.items()]
    return Cell(arm=arm, load=load, probe="generate", repeat=0, launch=1, order=list(outputs),
                started_at=0.0, wall_seconds=1.0, engine_seconds=1.0,
                conditions=conditions(), records=[], groups=groups)


def test_generation_divergence_positions(tmp_path: Path):
    same = {"alpha": [[5, 6, 7], [5, 6, 7]], "beta": [[1, 2, 3], [1, 2, 3]]}
    cells = [*score_cells("a", 1), *score_cells("a", 2), generate_cell("a", 1, same),
             generate_cell("a", 2, {"alpha": [[5, 6, 7], [5, 6, 7]],
                                    "beta": [[1, 9, 9], [1, 9, 9]]}),
             *score_cells("b", 1), *score_cells("b", 2), generate_cell("b", 1, same),
             generate_cell("b", 2, {**same, "alpha": [[5, 6, 7], [5, 6, 8]]})]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells)))
    a = summary.arms["a"].generation
    assert [w.diverged for w in a.within_load] == [0, 0]
    (pair,) = a.across_load
    assert pair.diverged == 1
    d = pair.divergences[0]
    assert (d.tag, d.first_position, d.differs_in) == ("beta", 1, "tokens")
    assert (d.a_continuation, d.b_continuation) == ([2, 3], [9, 9])
    assert signature_text(summary.arms["a"].signature) == "across-load only"
    b = summary.arms["b"]
    assert b.generation.within_load[1].divergences[0].first_position == 2
    assert signature_text(b.signature).startswith("within-load")
    (shift,) = summary.generation_arm_shifts
    assert (shift.prompts, shift.diverged, shift.divergences) == (2, 0, [])
    assert shift.diverged_ci95[0] == 0.0
    assert "generate" in summary.untested  # the fixture plan did not enable it


def test_scoring_and_generation_requests_have_their_own_rows(tmp_path: Path):
    outcomes = {("score", 256, 1): STABLE, ("score", 256, 2): ["h", "h", "s", "h"],
                ("generate", 256, 1): STABLE, ("generate", 256, 2): STABLE,
                ("score", 1024, 1): STABLE, ("score", 1024, 2): ["h", "t", "t", "h"],
                ("generate", 1024, 1): STABLE, ("generate", 1024, 2): ["h", "g", "h", "h"]}
    cells = [*score_cells("a", 1), concurrency_cell("a", 1, outcomes)]
    root = make_bundle(tmp_path, cells, arms=("a",), loads=1, concurrency=True)
    summary = summarize(read_evidence(root))
    conc = summary.arms["a"].concurrency
    assert conc.table.kinds == ["score", "generate"]
    grid = {(e.kind, e.length, e.level): e for e in conc.table.cells}
    assert grid[("score", 256, 2)].distinct == 2
    assert grid[("generate", 256, 2)].distinct == 1
    assert grid[("score", 1024, 2)].off_majority == 2
    # only scoring requests drift at 256 tokens: the floor is named per kind
    assert conc.first_drift.model_dump() == {"length": 256, "level": 2, "kinds": ["score"]}
    assert signature_text(summary.arms["a"].signature) == \
        "batch-composition (scoring requests from 256 tokens at concurrency 2)"
    write_derived(root)
    report = (root / "report.md").read_text()
    assert "| score | 256 | 1 | 2 (1 off) |" in report
    assert "| generate | 1024 | 1 | 2 (1 off) |" in report


def test_cached_responses_that_differ_are_cache_dependent(tmp_path: Path):
    # with the prefix cache on, the first request of each group is computed fresh and
    # the rest reuse its prefix; at 512 tokens the cached ones come out different
    outcomes = {(128, 1): ["h", "h@", "h@", "h@"], (128, 2): ["h", "h@", "h@", "h@"],
                (512, 1): ["h", "k@", "k@", "k@"], (512, 2): ["h", "k@", "k@", "k@"]}
    cells = [*score_cells("a", 1), concurrency_cell("a", 1, outcomes)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",), loads=1,
                                                  concurrency=True,
                                                  prefix_cache={"a": True})))
    arm = summary.arms["a"]
    splits = arm.concurrency.cache_splits
    assert [(s.length, s.level, s.differ) for s in splits] == [
        (128, 1, False), (128, 2, False), (512, 1, True), (512, 2, True)]
    assert splits[2].cached == 3 and splits[2].uncached == 1
    assert "cache-dependent (2 of 4 groups" in signature_text(arm.signature)
    assert arm.prefix_cache is True
    assert "prefix cache" in signature_meaning(arm.signature)


def test_within_load_drift_only_with_the_cache_on_is_cache_dependent(tmp_path: Path):
    cells = [cell("off", 1), cell("off", 1, "repeat", 1),
             cell("on", 1), cell("on", 1, "repeat", 1, shifts={"beta": 1e-4})]
    summary = summarize(read_evidence(make_bundle(
        tmp_path, cells, arms=("off", "on"), loads=1, prefix_cache={"on": True})))
    assert summary.arms["off"].signature.name == "bit-identical"
    assert summary.arms["off"].prefix_cache is False
    assert signature_text(summary.arms["on"].signature) == (
        "within-load + cache-dependent (prefix cache on; `off` with it off held still "
        "within its loads)")


def test_within_load_drift_with_both_caches_off_is_not_cache_dependent(tmp_path: Path):
    cells = [cell("off", 1), cell("off", 1, "repeat", 1),
             cell("on", 1), cell("on", 1, "repeat", 1, shifts={"beta": 1e-4})]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("off", "on"),
                                                  loads=1)))
    assert signature_text(summary.arms["on"].signature) == "within-load"
