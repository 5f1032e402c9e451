"""servediff killed with SIGKILL while a wrapped engine runs: no orphan, nothing lost.

The launch command wraps the real embedded engine in a shell that does not
`exec` it (`bash -c "... ; echo done"`), the case in which the parent-death
signal alone reaches only the shell and the engine lives on. servediff is
killed mid-load; the engine must go with it (the supervisor that runs every
engine stops its whole process group), the same command must resume, record
the killed launch as stopped at resume and say so in the report, and no
finished cell may be lost, changed or measured twice.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servediff.engines.process import group_members
from tests.integration.engines import DRIFT_ONLY, TAGS, assert_all_stopped, servediff

pytestmark = pytest.mark.integration

WRAPPED = ["bash", "-c", f'{sys.executable} -m servediff.engines.hf_server "$@"; echo done',
           "wrapper", "--model", "{model}", "--host", "{host}", "--port", "{port}"]
PLAN = f"""
engine = "transformers"
model = "smollm2"
loads_per_arm = 2
[launch]
command = {json.dumps(WRAPPED)}
[engine_options]
device = "cpu"
[arms.wrapped]
[corpus]
tags = {json.dumps(TAGS)}
[probes.repeat]
count = 1
""" + DRIFT_ONLY


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_servediff_killed_mid_load_leaves_no_engine_and_resumes(tmp_path: Path):
    (tmp_path / "plan.toml").write_text(PLAN)
    run = tmp_path / "run"
    first = run / "cells" / "wrapped-load1-score.json"
    proc = subprocess.Popen([sys.executable, "-m", "servediff", "run", "plan.toml", "--out",
                             "run"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 900
        while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first.exists(), "the first cell was never written"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    kept = first.read_bytes()
    (launch,) = json.loads((run / "loads" / "wrapped-load1.json").read_text())["launches"]
    assert launch["stop"] is None  # servediff had no chance to record a stop
    # the engine went with servediff: nothing of its group is left, its port is closed
    for _ in range(300):
        if not group_members(launch["pgid"]) and not listening(launch["port"]):
            break
        time.sleep(0.1)
    assert group_members(launch["pgid"]) == [] and not listening(launch["port"])

    done = servediff("run", "plan.toml", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "had no stop record" in done.stderr
    stale, again = json.loads((run / "loads" / "wrapped-load1.json").read_text())["launches"]
    assert stale["stop"]["at_resume"] is True and stale["stop"]["port_closed"] is True
    assert stale["error"] == "servediff ended before it stopped this launch"
    assert again["stop"]["at_resume"] is False and again["error"] is None
    assert first.read_bytes() == kept
    names = sorted(p.stem for p in (run / "cells").glob("*.json"))
    assert names == sorted(f"wrapped-load{n}-{c}" for n in (1, 2)
                           for c in ("score", "repeat-r1"))
    cells = [json.loads((run / "cells" / f"{n}.json").read_text()) for n in names]
    assert all(len(c["records"]) == len(TAGS) for c in cells)
    report = (run / "report.md").read_text()
    assert "`wrapped` load 1 attempt 1: servediff ended before it stopped this launch" in report
    assert "at resume" in report
    assert_all_stopped(run)
