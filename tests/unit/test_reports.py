"""report.html, the evidence packet and `servediff report --format`, on fixture bundles."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import jsonschema
import pytest

from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence, write_manifest
from servediff.cli import main
from servediff.derived import write_derived
from servediff.errors import InputError
from servediff.packet.evidence import build, schema, target_revision
from servediff.packet.registry import registry_packet
from servediff.packet.registry import schema as registry_schema
from tests.fixtures.bundles import Launch, Layout, Stop, write_load
from tests.unit.test_verdict import north_star

PLOTS = {"dnll-per-text", "dnll-magnitude", "first-moved", "drift-heatmap", "survival-map",
         "speed", "capacity"}


def test_html_is_self_contained_with_every_plot(tmp_path: Path):
    root = north_star(tmp_path / "run")
    write_derived(root)
    page = (root / "report.html").read_text()
    drawn = set(re.findall(r'data-plot="([\w-]+)" data-drawn="yes"', page))
    # the north star has no concurrency probe: that plot says so instead of drawing
    assert drawn == PLOTS - {"drift-heatmap"}
    assert 'data-plot="drift-heatmap" data-drawn="no"' in page
    assert page.count("<svg") == len(drawn)
    # nothing is loaded from anywhere
    assert not re.search(r"<script|<link|src=\"http|url\(http", page)
    assert "default-src 'none'" in page
    assert "What broke" in page and "93,574" in page


def test_untrusted_text_is_escaped(tmp_path: Path):
    root = north_star(tmp_path / "run")
    layout = Layout(root)
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    write_load(layout, "pinned", 9, "drift", Launch(
        attempt=1, command=["engine"], env_diff={}, options={}, host="127.0.0.1", port=1,
        pid=1, started_at=0.0, error=evil,
        stop=Stop(died_before_stop=True, returncode=-6, signal="SIGABRT", needed_kill=False,
                  stop_seconds=0.1, port_closed=True, group_gone=True, log_tail=evil)))
    write_manifest(root)
    write_derived(root)
    page = (root / "report.html").read_text()
    assert "<script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)" in page and "&lt;img src=x" in page


def test_packet_validates_and_hashes_match(tmp_path: Path):
    root = north_star(tmp_path / "run")
    summary = write_derived(root)
    with pytest.raises(InputError, match="identified only by its name"):
        build(root, summary, None)  # the fixture's loads hashed no weights
    packet = build(root, summary, "93efa2f097d58c2a74874c7e644dbc9b0cee75a2").model_dump(
        mode="json")
    jsonschema.validate(packet, schema())
    assert packet["schema_version"] == "1.0"
    assert packet["claim"]["evidence_status"] == "contributor-measured, conditions as reported"
    assert packet["target"]["revision_kind"] == "given"
    for artifact in packet["artifacts"]:
        data = (root / artifact["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == artifact["sha256"], artifact["path"]
        assert len(data) == artifact["bytes"]
    assert any("died" in o["text"] for o in packet["hypothesis"]["disproving_observations"])
    assert packet["execution"]["observed_count"] > 0
    # what an arm may cost: what every run measures, then the property each probe with a
    # finding of its own compares, in that probe's words (probes/prefix.py)
    assert packet["hypothesis"]["statement"].endswith(
        "no arm costs speed, capacity, survival or prefix reuse relative to `stock`.")
    # a packet that is not what the schema says is caught by the schema
    broken = {**packet, "schema_version": "2"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema())


def set_builds(root: Path, builds: dict[str, str]) -> None:
    """Give each arm's launches another engine build (as the engine reports its version)."""
    for path in (root / "loads").glob("*.json"):
        record = json.loads(path.read_text())
        for launch in record["launches"]:
            launch["engine"] = {"version": {"sglang": builds[record["arm"]]}}
        path.write_text(json.dumps(record))
    write_manifest(root)


def test_packet_names_where_it_applies_and_the_chain_of_pins(tmp_path: Path):
    root = north_star(tmp_path / "run")
    summary = write_derived(root)
    same = build(root, summary, "93efa2f097d58c2a74874c7e644dbc9b0cee75a2")
    where = same.applicability
    assert where.serving_stack == ["transformers"] and where.node_count == []
    # the sweep sent 1 and 4 prompts at once; the pinned arm's server died in it
    assert where.concurrency_regime == ["concurrency=1", "concurrency=4"]
    assert "prefill" in where.failure_stage
    assert same.pin_chain == []  # one engine build: no chain of pins
    set_builds(root, {"stock": "0.4.9", "pinned": "0.5.0"})
    summary = write_derived(root)
    packet = build(root, summary, "93efa2f097d58c2a74874c7e644dbc9b0cee75a2")
    jsonschema.validate(packet.model_dump(mode="json"), schema())
    chains = {(c.finding, c.BROKEN_PIN, c.KNOWN_GOOD_PIN) for c in packet.pin_chain}
    # stock's scores drift and pinned's do not; pinned carries the costs
    assert ("drift", "sglang=0.4.9", "sglang=0.5.0") in chains
    (costs,) = [(broken, good) for f, broken, good in chains if "cost(s)" in f]
    assert costs == ("sglang=0.5.0", "sglang=0.4.9")
    assert all(c.FIXED_BY == "UNKNOWN" and c.REPRO_BEFORE == "PASS" for c in packet.pin_chain)
    assert "sglang=0.4.9" in packet.applicability.stack_version
    # the registry's shape: its schema holds, the moving names it refuses are absent, and
    # the claim boundary carries what its schema has no field for
    registry = registry_packet(root, packet, summary).model_dump(mode="json")
    jsonschema.validate(registry, registry_schema())
    assert registry["target"]["exact_revision"] not in ("main", "master", "HEAD", "latest")
    assert registry["execution"]["failure_cause"] == "NONE"
    assert registry["execution"]["observed_count"] > 0
    assert registry["hypothesis"]["expected_disproof_observation"].endswith(
        "an arm that costs speed, KV capacity, survival of long or concurrent prompts, or "
        "prefix reuse")
    boundary = registry["claim"]["claim_boundary"]
    assert "Applies to: " in boundary and "serving_stack=transformers" in boundary
    assert "BROKEN_PIN=sglang=0.4.9" in boundary and "KNOWN_GOOD_PIN=sglang=0.5.0" in boundary
    refs = {a["ref"]: a["type"] for a in registry["artifacts"]}
    assert refs["manifest.json"] == "manifest" and refs["summary.json"] == "metric"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**registry, "applicability": {}}, registry_schema())


@pytest.mark.parametrize("revision", ["main", "latest", "HEAD", "nightly"])
def test_mutable_revisions_are_refused(revision: str):
    with pytest.raises(InputError, match="pin the model"):
        target_revision("Org/Model", {}, revision)


def test_model_named_with_a_mutable_revision_says_what_to_pin():
    with pytest.raises(InputError, match="mutable revision `latest`.*pass --revision"):
        target_revision("Org/Model:latest", {}, None)
    assert target_revision("smollm2", {"model.safetensors": "ab" * 32}, None) == (
        f"sha256:{'ab' * 32}", "weights-sha256")


def cli(*args: str) -> int | str | None:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code


def test_export_and_report_formats_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture):
    root = north_star(tmp_path / "run")
    write_derived(root)
    assert cli("export", str(root), "--packet") == 2
    assert "pin it: pass --revision" in capsys.readouterr().err
    assert cli("export", str(root), "--packet", "--revision", "0123456789abcdef") == 0
    packet = json.loads((tmp_path / "run.packet.json").read_text())
    jsonschema.validate(packet, schema())
    registry = json.loads((tmp_path / "run.registry-packet.json").read_text())
    jsonschema.validate(registry, registry_schema())
    assert registry["packet_id"] == packet["packet_id"]
    assert cli("verify", str(root)) == 0  # exporting changed nothing the manifest covers
    capsys.readouterr()
    assert cli("report", str(root), "--format", "json", "--stdout") == 0
    printed = capsys.readouterr().out
    assert json.loads(printed[: printed.rindex("}") + 1])["verdict"]["pairs"]
    assert json.loads((root / "summary.json").read_text()) == \
        summarize(read_evidence(root)).model_dump(mode="json")


def test_the_heat_map_paints_one_result_in_the_identical_colour(tmp_path: Path):
    from servediff.report.plots import IDENTICAL, MORE_RESULTS, drift_heatmap
    from tests.fixtures.bundles import cell, concurrency_cell, make_bundle

    # c=2: all four agree with each other and not with the control: 2 results
    outcomes = {(256, 1): ["h"] * 4, (256, 2): ["w"] * 4, (256, 4): ["h"] * 4}
    cells = [cell("a", 1), cell("a", 1, "repeat", 1), concurrency_cell("a", 1, outcomes)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",), loads=1,
                                                  concurrency=True)))
    svg = drift_heatmap(summary)
    assert svg is not None
    fills = dict(re.findall(r'id="heat-0-256-(\d+-\d+)">\s*<path[^>]*style="fill: (#[0-9a-f]+)',
                            svg))
    assert fills == {"1-1": IDENTICAL, "2-2": MORE_RESULTS[0], "4-1": IDENTICAL}


def test_curves_with_the_same_values_share_one_line_that_names_them_all(tmp_path: Path):
    from servediff.report.plots import comparisons, dnll_magnitude, overlaid

    drawn = overlaid([("a", {"x": 0.0, "y": 0.0}), ("b", {"y": 0.0, "x": 0.0}),
                      ("c", {"x": 1e-3, "y": 0.0})])
    assert drawn == [("a; b (2 identical curves)", [0.0, 0.0]), ("c", [1e-3, 0.0])]
    summary = summarize(read_evidence(north_star(tmp_path / "run")))
    svg = dnll_magnitude(summary)
    assert svg is not None
    assert svg.count('id="curve-') == len(overlaid(comparisons(summary, repeats=False)))


def test_speed_at_one_length_is_labelled_bars_on_axes_from_zero(tmp_path: Path):
    from matplotlib.container import BarContainer

    from servediff.report.plots import speed_figure

    summary = summarize(read_evidence(north_star(tmp_path / "run")))
    assert {e.prompt_tokens for c in summary.costs.values() if c.speed
            for e in c.speed.per_length} == {512}
    fig = speed_figure(summary)
    assert fig is not None
    for ax in fig.axes:
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert len(bars) == 1 and len(bars[0]) == 2  # one bar per arm
        assert ax.get_ylim()[0] == 0
        labels = [t.get_text() for t in ax.texts]
        assert len(labels) == 2 and all(labels)
    assert "512 prompt tokens" in fig.get_suptitle()


def test_report_html_renders_emphasis_and_links_evidence_files():
    from servediff.report.html import markdown_to_html

    page = markdown_to_html(
        "- cost: x `a_b` _(covers: 512 prompt tokens)_ [cells/a-cost1-speed.json, "
        "cells/b-cost1-speed.json] snake_case stays\n\n_a whole line_\n")
    assert "<em>(covers: 512 prompt tokens)</em>" in page and "_(" not in page
    assert '<a href="cells/a-cost1-speed.json">cells/a-cost1-speed.json</a>' in page
    assert '<a href="cells/b-cost1-speed.json">' in page
    assert "<code>a_b</code>" in page and "snake_case stays" in page
    assert "<p><em>a whole line</em></p>" in page


def test_every_claim_class_has_its_words_registered_once():
    """report/words.py says each claim class's sentence, regime and label in one entry;
    a claim class without one is refused by name, not worded as another class."""
    from typing import get_args

    from servediff.analysis.findings import Claim, Finding
    from servediff.report import words

    classes = set(get_args(get_args(Claim)[0]))
    assert classes and classes == set(words.SAID)

    class Unworded(Finding):
        kind: str = "cost"

    with pytest.raises(TypeError, match="no words for a Unworded"):
        words.claim_text(Unworded())
    with pytest.raises(TypeError, match="no words for a Unworded"):
        words.shown_kind(Unworded())  # type: ignore[arg-type]
