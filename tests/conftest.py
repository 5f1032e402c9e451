from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Heavy one-off work (the converted SmolLM2) is cached in a git-ignored folder.
os.environ.setdefault("SERVEDIFF_CACHE", str(ROOT / ".cache" / "servediff"))


@pytest.fixture
def write(tmp_path: Path):
    def _write(name: str, body: str) -> Path:
        path = tmp_path / name
        path.write_text(body, encoding="utf-8")
        return path

    return _write
