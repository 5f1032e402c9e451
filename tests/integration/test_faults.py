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
from tests.integration.engines import (
    DRIFT_ONLY,
    TAGS,
    assert_all_stopped,
    probes_off,
    servediff,
)

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


FROZEN = f"""
engine = "transformers"
model = "smollm2"
loads_per_arm = 1
[engine_options]
device = "cpu"
[arms.frozen]
[corpus]
tags = {json.dumps(TAGS)}
[probes.repeat]
count = 1
[scoring]
request_timeout_s = 20
[launch]
stall_window_s = 5
stop_grace_s = 5
[probes.generate]
texts = 2
prompt_tokens = 64
max_tokens = 128
repeats = 1
""" + probes_off("concurrency", "speed", "sweep", "prefix")


def test_a_frozen_engine_is_recorded_as_hung_killed_and_started_again(tmp_path: Path):
    """SIGSTOP once it is ready, as a debugger or a stuck driver would: no CPU, no answer,
    not even /health. The request is recorded as hung, the stopped group is killed, the
    load is started again and the run completes."""
    (tmp_path / "plan.toml").write_text(FROZEN)
    run = tmp_path / "run"
    load = run / "loads" / "frozen-load1.json"
    proc = subprocess.Popen([sys.executable, "-m", "servediff", "run", "plan.toml", "--out",
                             "run"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline, pid = time.monotonic() + 900, None
        while pid is None and proc.poll() is None and time.monotonic() < deadline:
            if load.exists():
                launch = json.loads(load.read_text())["launches"][0]
                if launch["seconds_to_ready"] is not None:
                    pid = launch["pid"]
            time.sleep(0.05)
        assert pid is not None, "the engine never became ready"
        # the whole group, as SIGSTOP from a terminal would (the supervisor leads it)
        os.killpg(pid, signal.SIGSTOP)
        _, err = proc.communicate(timeout=1200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    frozen, again = json.loads(load.read_text())["launches"]
    assert "hung" in (frozen["error"] or ""), frozen["error"]
    assert frozen["stop"]["needed_kill"] is True and frozen["stop"]["group_gone"] is True
    assert again["error"] is None and again["stop"]["died_before_stop"] is False
    # every cell of the load, each once: those the frozen launch left were measured again
    names = sorted(p.stem for p in (run / "cells").glob("*.json"))
    assert names == ["frozen-load1-generate", "frozen-load1-repeat-r1", "frozen-load1-score"]
    assert servediff("verify", "run", cwd=tmp_path).returncode == 0
    assert_all_stopped(run)
