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


def installed(python: Path, under: str | None = None) -> dict[str, str]:
    """The packages this python sees (those installed under `under` only, where given)."""
    done = subprocess.run([str(python), "-m", "pip", "list", "-v", "--format", "json"],
                          capture_output=True, text=True, check=True, timeout=600)
    return {canonical(d["name"]): d["version"] for d in json.loads(done.stdout)
            if under is None or d.get("location") == under}


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


def test_a_real_install_beside_another_torch_keeps_it(sglang_python: Path, tmp_path: Path):
    """Installed for real: a new venv that sees the SGLang environment's packages (torch
    2.14.1, not the 2.13.0 of constraints-cpu.txt) through a .pth file, as a venv built
    on top of another does; `pip install '.[hf]'` into it adds what is missing and leaves
    every package it sees, torch first, at its version."""
    site = subprocess.run([str(sglang_python), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    venv = tmp_path / "venv"
    subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True, timeout=600)
    python = venv / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; "
                          "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                         text=True, check=True).stdout.strip()
    (Path(own) / "engine-env.pth").write_text(site + "\n")
    # what the engine's environment holds (the new venv's own pip and setuptools aside)
    before = installed(python, under=site)
    assert before["torch"] == "2.14.1", before.get("torch")
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"{ROOT}[hf]"],
                          capture_output=True, text=True, check=False, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    after = installed(python)
    assert "servediff" in after
    changed = {name: (version, after.get(name)) for name, version in before.items()
               if after.get(name) != version}
    assert changed == {}, changed
    torch = subprocess.run([str(python), "-c", "import torch; print(torch.__version__, "
                            "torch.__file__)"], capture_output=True, text=True, check=True)
    version, where = torch.stdout.split()
    assert version.startswith("2.14.1") and where.startswith(site), torch.stdout
