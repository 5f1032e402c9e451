"""The house's layering, read from the code's own imports, and the docs that state it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from servediff.analysis.findings import SUMMARY_SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "servediff"


def imported(path: Path) -> set[str]:
    """Every servediff module a file imports, at its top, under TYPE_CHECKING or in a
    function: each is an arrow of the house."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {name for name in found if name.startswith("servediff")}


def test_probes_never_import_the_analysis_or_the_report():
    for path in sorted((SRC / "probes").glob("*.py")):
        up = {m for m in imported(path)
              if m.startswith(("servediff.analysis", "servediff.report"))}
        assert not up, f"{path.name} imports {sorted(up)}"


def test_the_plan_reads_the_probes_only_through_their_settings_leaf():
    probes = {m for m in imported(SRC / "plan.py") if m.startswith("servediff.probes")}
    assert probes and all(m.startswith("servediff.probes.settings")
                          or m == "servediff.probes" for m in probes), probes
    # and the leaf imports nothing above the plan
    leaf = imported(SRC / "probes" / "settings.py")
    assert not {m for m in leaf if m.startswith(("servediff.plan", "servediff.probes.",
                                                 "servediff.analysis"))
                and not m.startswith("servediff.probes.settings")}, leaf


def test_docs_summary_states_the_code_schema_version_and_each_version_once():
    text = (ROOT / "docs" / "summary.md").read_text(encoding="utf-8")
    (stated,) = re.findall(r"`schema_version` is (\d+)", text)
    assert int(stated) == SUMMARY_SCHEMA_VERSION
    history = text.split("## Schema history", 1)[1]
    versions = [int(v) for v in re.findall(r"^- \*\*(\d+)\*\*", history, re.M)]
    assert versions == list(range(1, SUMMARY_SCHEMA_VERSION + 1))
    # no other page or docstring keeps a "now N" of its own
    for path in [ROOT / "docs" / "architecture.md", *SRC.rglob("*.py")]:
        assert not re.search(r"schema(?:_version`)? \(?now \d+", path.read_text("utf-8")), path


def test_the_raw_schema_history_ends_at_the_code_s_version_and_the_reader_takes_each():
    import servediff.evidence as evidence

    doc = evidence.__doc__ or ""
    history = doc.split("Schema history", 1)[1]
    versions = [int(v) for v in re.findall(r"^- (\d+):", history, re.M)]
    assert versions == list(range(1, evidence.SCHEMA_VERSION + 1))
    assert evidence.READABLE == tuple(versions)
    arch = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"the raw schema (version {evidence.SCHEMA_VERSION};" in arch
