"""The docs site builds with warnings as errors: a broken link or a page left out of it
fails the build (mkdocs.yml, strict). Rendering it in Chromium is
tests/integration/test_docs_render.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # not --quiet: MkDocs then counts no warning, and --strict fails nothing
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})


def test_the_docs_site_builds_strictly(tmp_path: Path):
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr
    # the home page is the README, its links into docs/ made the site's own
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Set up and run the main job" in home and 'href="plans/"' in home
    assert 'href="docs/' not in home
    # the settings reference is a page of its own, with the generated block
    plans = (tmp_path / "site" / "plans" / "index.html").read_text(encoding="utf-8")
    assert "Every setting" in plans and "cold starts per arm for the drift probes" in plans


def test_a_broken_link_fails_the_build(tmp_path: Path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("*.tar.gz"))
    (docs / "plans.md").write_text((docs / "plans.md").read_text(encoding="utf-8")
                                   + "\nSee [the missing page](no-such-page.md).\n",
                                   encoding="utf-8")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace(
        "docs_dir: docs", f"docs_dir: {docs}").replace(
        "scripts/mkdocs_hooks.py", str(ROOT / "scripts" / "mkdocs_hooks.py"))
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "'plans.md' contains a link 'no-such-page.md'" in done.stderr, done.stderr
