"""`pip install 'servediff[hf]'` beside an engine that is already installed changes none of
its packages: asked of pip itself (a dry run with its install report) in the real vLLM and
SGLang environments, which hold other torch builds (vLLM's 2.13.0+cpu, SGLang's 2.14.1)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(python: Path) -> dict[str, str]:
    done = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"],
                          capture_output=True, text=True, check=True, timeout=600)
    return {canonical(d["name"]): d["version"] for d in json.loads(done.stdout)}


def would_install(python: Path, report: Path) -> dict[str, str]:
    """What `pip install '.[hf]'` would install or replace there (nothing is installed)."""
    done = subprocess.run([str(python), "-m", "pip", "install", "--dry-run", "--quiet",
                           "--report", str(report), f"{ROOT}[hf]"],
                          capture_output=True, text=True, check=False, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    items = json.loads(report.read_text())["install"]
    return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


@pytest.mark.parametrize("engine", ["vllm_python", "sglang_python"])
def test_installing_servediff_beside_an_engine_changes_none_of_its_packages(
        engine: str, request: pytest.FixtureRequest, tmp_path: Path):
    python: Path = request.getfixturevalue(engine)
    before = installed(python)
    assert "torch" in before and "transformers" in before
    plan = would_install(python, tmp_path / "report.json")
    assert "servediff" in plan
    # nothing it already has is upgraded, downgraded or reinstalled: torch least of all
    replaced = {name: (before[name], version) for name, version in plan.items()
                if name in before}
    assert replaced == {}, replaced
