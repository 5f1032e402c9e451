"""The verdict engine on the north-star scenario, as a fixture bundle.

Arms `stock` and `pinned`: `pinned` stops reload drift, and costs speed within
noise only, but cuts the KV pool to under a third, dies at the first prompt of
8,192 tokens and loses prefix reuse. Every cost must be named; the verdict
must never call the flags free.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence
from servediff.derived import write_derived
from servediff.report.words import claim_text, coverage_text, fix_text, headline
from tests.fixtures.bundles import (
    cell,
    make_bundle,
    prefix_cell,
    speed_cell,
    sweep_cell,
)

CONTEXT = 32768
LENGTHS = [1024, 2048, 4096, 8192, 16384, CONTEXT - 1, CONTEXT + CONTEXT // 4]


def north_star(root: Path) -> Path:
    cells = [cell("stock", 1), cell("stock", 2, shifts={"alpha": 8.81, "gamma": 0.5}),
             cell("pinned", 1), cell("pinned", 2)]
    for arm in ("stock", "pinned"):
        cells += [cell(arm, load, "repeat", 1, shifts={"alpha": 8.81, "gamma": 0.5}
                       if arm == "stock" and load == 2 else None) for load in (1, 2)]
    decode = {"stock": ([100.0, 102.0, 98.0], [101.0, 99.0, 100.0]),
              "pinned": ([101.0, 99.0, 100.0], [102.0, 98.0, 100.5])}
    for arm, loads in decode.items():
        for load, values in enumerate(loads, start=1):
            cells.append(speed_cell(arm, load, values, [0.20, 0.21, 0.19]))
    stock = {(n, 1): "ok" if n < CONTEXT else "error" for n in LENGTHS}
    stock.update({(n, 4): "ok" for n in LENGTHS if n < CONTEXT})
    pinned = {(n, 1): "ok" if n < 8192 else "death" for n in LENGTHS}
    pinned.update({(n, 4): "ok" if n < 2048 else "death" for n in LENGTHS if n < CONTEXT})
    cells += [sweep_cell("stock", CONTEXT, stock), sweep_cell("pinned", CONTEXT, pinned)]
    for load in (1, 2):
        cells.append(prefix_cell("stock", load, [0.9, 0.12, 0.11, 0.12], [0, 4096, 4096, 4096]))
        cells.append(prefix_cell("pinned", load, [0.9, 0.91, 0.89, 0.9], [0, 0, 0, 0]))
    return make_bundle(root, cells, arms=("stock", "pinned"), cost=True, capacity={
        "stock": {"kv_tokens": 324186, "max_concurrency": 9.89},
        "pinned": {"kv_tokens": 93574, "max_concurrency": 2.86}})


@pytest.fixture()
def summary(tmp_path: Path) -> dict:
    return summarize(read_evidence(north_star(tmp_path)))


def test_every_cost_of_the_north_star_is_named(summary: dict):
    (pair,) = summary.verdict.pairs
    assert (pair.baseline, pair.arm) == ("stock", "pinned")
    costs = [claim_text(c) for c in pair.claims if c.kind == "cost"]
    assert any("KV pool: `pinned` 93,574 vs `stock` 324,186 tokens (-71%)" in c for c in costs)
    assert any("died at the first prompt of 8,192 tokens (SIGABRT)" in c for c in costs)
    assert any("died at the first 4 concurrent prompts of 2,048 tokens" in c for c in costs)
    assert any(c.startswith("prefix reuse lost: a repeated 4,128-token prompt gets 0 cached "
                            "tokens under `pinned` vs 4,096 under `stock`") for c in costs)
    assert any("maximum concurrency" in c for c in costs)
    assert pair.costs == len(costs) == 5
    assert headline(pair).startswith("`pinned` vs `stock`: 5 cost(s) found: ")
    # speed differs by less than the noise band: said as such, with the band
    speed = [c for c in pair.claims if claim_text(c).startswith("decode tok/s")]
    assert speed and all(c.kind == "within noise" and "95 % band" in claim_text(c)
                         for c in speed)
    # the drift it fixed, with the counts
    drift = [claim_text(c) for c in pair.claims if c.kind == "drift"]
    assert drift == ["`stock` moved 2 of 4 texts between cold loads 1 and 2 (max |dNLL| 8.81)"]
    assert (fix_text(pair) or "").startswith(
        "`pinned` stopped the reload drift that `stock` showed, at these measured costs: KV pool")
    # the survival map: stock held to the context, its refusal past it is no failure
    stock = summary.costs["stock"].survival
    assert stock.largest_ok_length == {"1": CONTEXT - 1, "4": CONTEXT - 1}
    assert all(v is None for v in stock.first_failure.values())
    assert summary.costs["pinned"].survival.largest_ok_length["1"] == 4096


def test_the_verdict_never_says_free(summary: dict, tmp_path: Path):
    text = json.dumps(summary.verdict.model_dump(mode="json")) + " ".join(
        claim_text(c) + headline(p) for p in summary.verdict.pairs for c in p.claims)
    assert not re.search(r"\bfree\b", text, re.IGNORECASE)
    root = north_star(tmp_path / "again")
    write_derived(root)
    report = (root / "report.md").read_text()
    assert not re.search(r"\bfree\b", report, re.IGNORECASE)
    for found in re.finditer(r"no cost", report + text, re.IGNORECASE):
        assert (report + text)[found.start():].startswith("no cost observed within")
    assert "93,574" in report and "SIGABRT" in report


def test_no_cost_found_is_stated_with_its_regime_and_what_was_not_tested(tmp_path: Path):
    cells = [cell(arm, load) for arm in ("a", "b") for load in (1, 2)]
    cells += [cell(arm, load, "repeat", 1) for arm in ("a", "b") for load in (1, 2)]
    for arm in ("a", "b"):
        for load in (1, 2):
            cells.append(speed_cell(arm, load, [100.0, 101.0, 99.0], [0.2, 0.21, 0.19]))
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, cost=True)))
    (pair,) = summary.verdict.pairs
    assert pair.costs == 0
    assert headline(pair).startswith(
        "`b` vs `a`: no cost observed within speed at 512 prompt tokens with 64 output "
        "tokens, one request at a time")
    # sweep and prefix were planned but nothing came back; capacity is not reported
    assert "Not tested: capacity, concurrency, generate, prefix, sweep" in headline(pair)
    assert set(summary.untested) == {"capacity", "concurrency", "generate", "prefix",
                                        "sweep"}


@pytest.mark.parametrize(("kv_b", "kind", "said"), [
    # vLLM on an H100: batch-invariant kernels left 0.4 % more memory for the pool
    (1_080_448, "note", "1,080,448 vs `a` 1,076,400 tokens (+0.4%), the same within 1%"),
    (1_076_400, "note", "1,076,400 vs `a` 1,076,400 tokens (+0%), the same"),
    (1_065_000, "cost", "1,065,000 vs `a` 1,076,400 tokens (-1%)"),
    (1_090_000, "gain", "1,090,000 vs `a` 1,076,400 tokens (+1%)")])
def test_a_kv_pool_within_a_percent_is_the_same_pool(kv_b: int, kind: str, said: str,
                                                     tmp_path: Path):
    cells = [cell(arm, load) for arm in ("a", "b") for load in (1, 2)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, cost=True, capacity={
        "a": {"kv_tokens": 1_076_400}, "b": {"kv_tokens": kv_b}})))
    (pair,) = summary.verdict.pairs
    (kv,) = [c for c in pair.claims if claim_text(c).startswith("KV pool")]
    assert (kv.kind, claim_text(kv)) == (kind, f"KV pool: `b` {said}")
    assert pair.costs == (kind == "cost")


@pytest.mark.parametrize(("slots_b", "kind", "said"), [
    # vLLM on an H100: the requests of the full context the pool holds, 0.2 % more
    (131.63, "note", "`b` 132 vs `a` 131 (+0.2%), the same within 1%"),
    (120.0, "cost", "`b` 120 vs `a` 131 (-9%)"),
    (140.0, "gain", "`b` 140 vs `a` 131 (+7%)")])
def test_a_maximum_concurrency_within_a_percent_is_the_same(slots_b: float, kind: str,
                                                            said: str, tmp_path: Path):
    cells = [cell(arm, load) for arm in ("a", "b") for load in (1, 2)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, cost=True, capacity={
        "a": {"kv_tokens": 1_076_400, "max_concurrency": 131.4},
        "b": {"kv_tokens": 1_078_320, "max_concurrency": slots_b}})))
    (pair,) = summary.verdict.pairs
    (slots,) = [c for c in pair.claims if claim_text(c).startswith("maximum concurrency")]
    assert (slots.kind, claim_text(slots)) == (kind, f"maximum concurrency: {said}")
    assert pair.costs == (kind == "cost")


def test_a_speed_difference_outside_the_band_is_a_cost_with_its_size(tmp_path: Path):
    cells = [cell(arm, 1) for arm in ("a", "b")]
    for load in (1, 2):
        cells.append(speed_cell("a", load, [100.0, 101.0, 99.0], [0.2, 0.21, 0.19]))
        cells.append(speed_cell("b", load, [80.0, 81.0, 79.0], [0.2, 0.21, 0.19]))
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, loads=1, cost=True)))
    (pair,) = summary.verdict.pairs
    (decode,) = [c for c in pair.claims if claim_text(c).startswith("decode tok/s")]
    assert decode.kind == "cost"
    assert "`b` 80 vs `a` 100 (-20.0%), a cost outside the noise" in claim_text(decode)
    assert headline(pair).startswith("`b` vs `a`: 1 cost(s) found: decode tok/s")


def test_free_one_at_a_time_and_a_cost_four_at_once_are_two_claims(tmp_path: Path):
    # the short single-stream check says "free"; four requests in flight say otherwise
    cells = [cell(arm, 1) for arm in ("a", "b")]
    for load in (1, 2):
        for arm, busy_decode in (("a", [60.0, 61.0, 59.0]), ("b", [30.0, 31.0, 29.0])):
            alone = speed_cell(arm, load, [100.0, 101.0, 99.0], [0.2, 0.21, 0.19])
            loaded = speed_cell(arm, load, busy_decode, [0.5, 0.52, 0.48], concurrency=4)
            cells.append(alone.model_copy(update={"speed": alone.speed + loaded.speed}))
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, loads=1, cost=True)))
    assert [(e.prompt_tokens, e.concurrency, e.replicates)
            for e in summary.costs["b"].speed.per_length] == [(512, 1, 6), (512, 4, 6)]
    (pair,) = summary.verdict.pairs
    decode = {c.comparison.concurrency: c for c in pair.claims
              if claim_text(c).startswith("decode tok/s")}
    assert decode[1].kind == "within noise" and decode[4].kind == "cost"
    assert claim_text(decode[4]).startswith(
        "decode tok/s at 512 prompt tokens, 4 at once: `b` 30 vs `a` 60 (-50.0%)")
    assert summary.verdict.coverage.speed_levels == [1, 4]
    assert "1 and 4 requests at a time" in coverage_text(summary.verdict.coverage)


def test_monotone_replicates_are_flagged(tmp_path: Path):
    cells = [cell("a", 1), speed_cell("a", 1, [100.0, 97.0, 95.0], [0.2, 0.2, 0.2]),
             speed_cell("a", 2, [93.0, 90.0, 88.0], [0.2, 0.2, 0.2])]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",), loads=1,
                                                  cost=True)))
    speed = summary.costs["a"].speed
    assert [t.model_dump() for t in speed.monotone_drift] == [
        {"prompt_tokens": 512, "metric": "decode_tok_s", "concurrency": 1}]
    assert speed.per_length[0].replicates == 6  # the warm-up replicates are dropped


def test_two_replicates_give_no_band(tmp_path: Path):
    cells = [cell(arm, 1) for arm in ("a", "b")]
    cells += [speed_cell(arm, 1, [100.0, 90.0], [0.2, 0.3]) for arm in ("a", "b")]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, loads=1, cost=True)))
    (pair,) = summary.verdict.pairs
    speed = [c for c in pair.claims if "decode tok/s" in claim_text(c)]
    assert speed[0].kind == "note" and "not enough replicates" in claim_text(speed[0])


def test_an_error_inside_the_context_is_a_failure_past_it_is_not(tmp_path: Path):
    outcomes = {(1024, 1): "ok", (2047, 1): "error", (2560, 1): "error"}
    cells = [cell("a", 1), cell("b", 1), sweep_cell("a", 2048, {
        (1024, 1): "ok", (2047, 1): "ok", (2560, 1): "error"}), sweep_cell("b", 2048, outcomes)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, loads=1, cost=True)))
    a, b = summary.costs["a"].survival, summary.costs["b"].survival
    assert a.first_failure == {"1": None} and a.largest_ok_length == {"1": 2047}
    assert b.first_failure["1"].length == 2047
    (pair,) = summary.verdict.pairs
    assert ("`b`: error response at the first prompt of 2,047 tokens (HTTP 400); survives "
            "1,024, errors from 2,047 tokens (not narrowed to 102 tokens)") in [
        claim_text(c) for c in pair.claims if c.kind == "cost"]
