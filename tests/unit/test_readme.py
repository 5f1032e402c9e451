"""The README stays true: its test command is what CI runs, its plans validate, and every
link it and the docs make resolves to a file of the repository."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from servediff.plan import resolve_plan

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_ci_runs_exactly_the_readme_s_test_command():
    commands = re.findall(r"```bash\n(.*?)\n```", README, re.S)
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert commands[1] == ci
    assert commands[0].endswith("servediff demo")


def test_the_readme_s_plans_are_valid(tmp_path: Path):
    small, factors = re.findall(r"```toml\n(.*?)```", README, re.S)[:2]
    plan, _ = resolve_plan(tomllib.loads(small), "README.md", tmp_path)
    assert list(plan.arms) == ["sdpa", "eager"]
    raw = {"name": "f", "engine": "sglang", "model": "org/model", **tomllib.loads(factors)}
    plan, _ = resolve_plan(raw, "README.md", tmp_path)
    assert list(plan.arms) == ["baseline", "autotune_off", "deterministic",
                               "autotune_off+deterministic"]


@pytest.mark.parametrize("page", ["README.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))])
def test_every_link_resolves(page: str):
    text = (ROOT / page).read_text()
    links = [m for m in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
             if not m.startswith(("http://", "https://", "mailto:"))]
    missing = [link for link in links if not ((ROOT / page).parent / link).exists()]
    assert missing == [], f"{page}: {missing}"
