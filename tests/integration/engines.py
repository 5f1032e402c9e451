"""Helpers shared by the integration tests that start real engines."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

# Short and long, prose, code, JSON and German: enough to see drift and to
# check agreement between engines, small enough for 2 CPU cores.
TAGS = ["prose-harbour", "code-python-lru", "json-event", "de-prose-wetter", "prose-essay-long"]

ENGINE_MARKERS = ("servediff.engines.hf_server", "vllm.entrypoints", "llama-server")


def servediff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servediff", *args], capture_output=True,
                          text=True, cwd=cwd, check=False, timeout=1800)


def run_plan(work: Path, plan: str) -> Path:
    (work / "plan.toml").write_text(plan)
    done = servediff("run", "plan.toml", "--out", "run", cwd=work)
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    return work / "run"


def rows(run: Path, arm: str, load: int, probe: str = "score") -> dict[str, dict]:
    cell = json.loads((run / "cells" / f"{arm}-load{load}-{probe}.json").read_text())
    return {r["tag"]: r for r in cell["records"]}


def engine_processes() -> list[str]:
    """Command lines of engine processes still alive on this machine (not zombies)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and any(marker in cmdline for marker in ENGINE_MARKERS):
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def assert_all_stopped(run: Path) -> None:
    """Every launch was stopped cleanly: group gone, port closed, nothing left running."""
    for path in sorted((run / "loads").glob("*.json")):
        for launch in json.loads(path.read_text())["launches"]:
            stop = launch["stop"]
            assert stop is not None, path
            assert stop["port_closed"] and stop["group_gone"], (path, stop)
            with socket.socket() as sock:
                assert sock.connect_ex(("127.0.0.1", launch["port"])) != 0, path
    assert engine_processes() == []
