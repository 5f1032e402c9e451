"""The GPU validation bundles committed under docs/validation re-derive here, with no GPU.

Each bundle was measured on an NVIDIA H200 (docs/validation/README.md); this
re-derives every number of its summary from its raw files on whatever machine
runs the tests, checks every file against its manifest, and checks the
headline findings the README quotes.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence, verify

VALIDATION = Path(__file__).resolve().parents[2] / "docs" / "validation"
BUNDLES = ["h200-transformers-numerics", "h200-transformers-cost", "h200-llama-cuda"]


def unpack(name: str, into: Path) -> Path:
    with tarfile.open(VALIDATION / f"{name}.tar.gz") as tar:
        tar.extractall(into, filter="data")
    return into / name


@pytest.mark.parametrize("name", BUNDLES)
def test_bundle_rederives_to_its_summary(name: str, tmp_path: Path):
    root = unpack(name, tmp_path)
    assert verify(root) > 10
    summary = json.loads((root / "summary.json").read_text())
    assert summarize(read_evidence(root)) == summary
    gpus = {g for c in read_evidence(root).cells for g in [x["name"] for x in c.conditions.gpus]}
    assert gpus == {"NVIDIA H200"}


def test_the_findings_the_readme_quotes(tmp_path: Path):
    numerics = json.loads((unpack(BUNDLES[0], tmp_path) / "summary.json").read_text())
    arms = numerics["arms"]
    assert all(len(a["across_load"]) == 3 for a in arms.values())  # 3 cold loads per arm
    assert all(p["moved"] == 0 for a in arms.values() for p in a["across_load"])
    assert [arms[a]["batch_size"][0]["moved"] for a in ("fp32", "tf32", "bf16")] == [16, 12, 14]
    assert arms["bf16"]["concurrency"]["control_ok"] is False
    assert arms["fp32"]["concurrency"]["control_ok"] is True
    llama = json.loads((unpack(BUNDLES[2], tmp_path) / "summary.json").read_text())
    for arm in ("fa_off", "fa_on"):
        conc = llama["arms"][arm]["concurrency"]
        assert conc["control_ok"] is True
        assert conc["first_drift"] == {"length": 128, "level": 2, "kinds": ["generate"]}
        assert llama["costs"][arm]["survival"]["largest_ok_length"] == {"1": 8191, "4": 8191}
