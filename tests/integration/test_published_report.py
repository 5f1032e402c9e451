"""A real two-arm llama-server run, published: report.html in headless Chromium with every
plot, and an evidence packet that validates against the schema with matching hashes.

Set SERVEDIFF_SCREENSHOT=docs/report-html.png to refresh the screenshot in the docs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest

from servediff.packet.evidence import schema
from servediff.packet.registry import schema as registry_schema
from servediff.report.plots import moved_comparisons
from tests.integration.browser import render
from tests.integration.engines import (
    MARK_BUSY,
    assert_all_stopped,
    claims,
    run_plan,
    servediff,
    summary_of,
)

pytestmark = pytest.mark.integration


def plan(binary: Path) -> str:
    command = [str(binary), "-m", "{model}", "--host", "{host}", "--port", "{port}", "-np", "2"]
    return (
        'name = "published"\nengine = "llamacpp"\nmodel = "smollm2"\nloads_per_arm = 1\n'
        "cost_loads_per_arm = 1\n"
        f"[launch]\ncommand = {json.dumps(command)}\n"
        '[arms.c1024]\nargs = ["-c", "1024"]\n[arms.c2048]\nargs = ["-c", "2048"]\n'
        '[corpus]\ntags = ["prose-short-storm"]\n'
        "[probes.repeat]\ncount = 1\n"
        "[probes.concurrency]\nlengths = [64, 256]\nlevels = [1, 2]\nrequests = 4\n"
        "max_tokens = 4\n"
        "[probes.generate]\ntexts = 1\nprompt_tokens = 32\nmax_tokens = 8\n"
        "[probes.speed]\nprompt_tokens = [64, 256]\nmax_tokens = 8\nreplicates = 3\n"
        "levels = [1, 2]\n"
        "[probes.sweep]\nstart = 256\nlevels = [1, 2]\n"
        "[probes.prefix]\nprefix_tokens = 300\nquestion_tokens = 16\nrequests = 3\n"
        + MARK_BUSY
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Path:
    return run_plan(tmp_path_factory.mktemp("published"), plan(llama_server))


def test_html_report_renders_every_plot_in_chromium(run: Path, chromium: Path, tmp_path: Path):
    assert_all_stopped(run)
    shot = tmp_path / "report.png"
    page = render(run / "report.html", chromium, shot)
    assert page["errors"] == []
    assert page["requests"] == []  # the page loads nothing
    plots = {p["key"]: p for p in page["plots"]}
    assert set(plots) == {"dnll-per-text", "dnll-magnitude", "first-moved", "drift-heatmap",
                          "survival-map", "speed", "capacity"}
    # where moved texts first differ: drawn when some comparison of the run moved
    moved = bool(moved_comparisons(summary_of(run)))
    for key, p in plots.items():
        if key == "first-moved" and not moved:
            assert p["drawn"] == "no" and p["svg"] == 0, p
            continue
        assert p["drawn"] == "yes" and p["svg"] == 1 and p["width"] > 100 and p["paths"] > 5, key
    assert shot.stat().st_size > 10_000
    if target := os.environ.get("SERVEDIFF_SCREENSHOT"):
        shutil.copyfile(shot, target)
    # twice the context: the capacity difference is named with its size
    gains = claims(run, "c2048", "gain")
    assert "KV pool: `c2048` 2,048 vs `c1024` 1,024 tokens (+100%)" in gains


def test_evidence_packet_validates_and_its_hashes_match(run: Path):
    done = servediff("export", str(run), "--packet", cwd=run.parent)
    assert done.returncode == 0, done.stderr
    packet = json.loads((run.parent / f"{run.name}.packet.json").read_text())
    jsonschema.validate(packet, schema())
    assert packet["target"]["revision_kind"] == "weights-sha256"
    assert packet["target"]["revision"].startswith("sha256:")
    paths = {a["path"] for a in packet["artifacts"]}
    assert {"plan.lock.json", "summary.json", "report.md", "report.html",
            "manifest.json"} <= paths
    for artifact in packet["artifacts"]:
        data = (run / artifact["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == artifact["sha256"], artifact["path"]
    assert servediff("verify", str(run), cwd=run.parent).returncode == 0
    text = json.dumps(packet)
    assert str(run.parent) not in text and "127.0.0.1" not in text  # scrubbed
    assert packet["sanitization"]["scrubbed"] is True
    # where it applies, from what the run recorded: llama-server on this CPU, its GGUF's
    # quantization read from the file's name
    where = packet["applicability"]
    assert where["serving_stack"] == ["llama.cpp"] and where["node_count"] == ["1"]
    assert "q4_1" in where["quantization"] and where["operating_system"] == ["linux"]
    assert where["context_regime"] and where["concurrency_regime"]
    assert packet["pin_chain"] == []  # one engine build
    registry = json.loads((run.parent / f"{run.name}.registry-packet.json").read_text())
    jsonschema.validate(registry, registry_schema())
    assert "Applies to: " in registry["claim"]["claim_boundary"]
    assert str(run.parent) not in json.dumps(registry)


def test_reports_rerender_from_the_bundle_alone(run: Path, tmp_path: Path):
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    for fmt in ("md", "html", "json"):
        done = servediff("report", str(copy), "--format", fmt, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    # the same bundle renders the same report (only the run's name in the title differs)
    assert (copy / "report.md").read_text().split("\n", 1)[1] == \
        (run / "report.md").read_text().split("\n", 1)[1]
    page = (copy / "report.html").read_text()
    assert page.count("<svg") == (run / "report.html").read_text().count("<svg") == 6
