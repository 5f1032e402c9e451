"""MkDocs hook: the README is the site's home page.

The README lives at the repository's root, where a clone shows it first, and links into
docs/; the site is built from docs/ (mkdocs.yml), so the home page is the README with
those links made relative to docs/. Nothing else of the README changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parents[1] / "README.md"


def on_files(files: Files, config: Any) -> Files:
    text = README.read_text(encoding="utf-8").replace("](docs/", "](")
    files.append(File.generated(config, "index.md", content=text))
    return files
