"""Stopping an engine process: group, port, and the GPU-memory check around it."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servediff import gpu
from servediff.engines import process
from servediff.engines.process import EngineProcess, free_port, group_members, stop_stale

# A stand-in "engine": a parent that forks a child (like vLLM's workers) and
# listens on the port it was given.
ENGINE = """
import os, socket, sys, time
port = int(sys.argv[1])
if os.fork() == 0:
    time.sleep(600)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen()
time.sleep(600)
"""


def start(tmp_path: Path) -> EngineProcess:
    port = free_port()
    proc = EngineProcess([sys.executable, "-c", ENGINE, str(port)], {}, tmp_path / "e.log",
                         "127.0.0.1", port)
    for _ in range(100):
        if process.port_open("127.0.0.1", port) and len(group_members(proc.pid)) == 3:
            break
        time.sleep(0.05)
    return proc


def test_stop_takes_the_whole_group_and_frees_the_port(tmp_path: Path):
    proc = start(tmp_path)
    assert len(group_members(proc.pid)) == 3  # the supervisor, the engine, its worker
    record = proc.stop(grace_s=5)
    assert record.signal == "SIGTERM" and not record.died_before_stop
    assert record.group_gone and record.port_closed
    assert group_members(proc.pid) == []
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", proc.port)) != 0
    assert record.gpu_memory_before_mb is None and record.gpu_memory_released is None


def test_gpu_memory_still_held_after_stop_is_recorded(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    proc = start(tmp_path)
    pid = proc.pid
    calls: list[set[int]] = []

    def held(pids: set[int]) -> dict[int, int]:
        calls.append(pids)
        # Before the stop the engine holds 512 MiB; an orphan keeps 128 MiB after it.
        return {pid: 512} if len(calls) == 1 else {pid: 128}

    monkeypatch.setattr(gpu, "memory_by_pid", held)
    record = proc.stop(grace_s=5, settle_s=1)
    assert record.gpu_memory_before_mb == {pid: 512}
    assert record.gpu_memory_after_mb == {pid: 128}
    assert record.gpu_memory_released is False
    assert pid in calls[0]


def test_gpu_memory_released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    proc = start(tmp_path)
    answers = iter([{proc.pid: 512}, {}])
    monkeypatch.setattr(gpu, "memory_by_pid", lambda pids: next(answers))
    record = proc.stop(grace_s=5)
    assert record.gpu_memory_released is True


def test_a_process_that_died_first_is_recorded_as_such(tmp_path: Path):
    port = free_port()
    proc = EngineProcess([sys.executable, "-c", "import sys; sys.exit(3)"], {},
                         tmp_path / "e.log", "127.0.0.1", port)
    proc.proc.wait(timeout=30)
    record = proc.stop(grace_s=5)
    assert record.died_before_stop and record.returncode == 3 and record.signal is None


# A stand-in servediff: starts an engine behind a wrapper that does not exec (bash runs
# it and would echo afterwards), prints the engine's process group, and waits.
SERVEDIFF = """
import sys, time
from pathlib import Path
from servediff.engines.process import EngineProcess
proc = EngineProcess(["bash", "-c", "sleep 600; echo done"], {}, Path(sys.argv[1]),
                     "127.0.0.1", int(sys.argv[2]))
print(proc.pid, flush=True)
time.sleep(600)
"""


def test_a_wrapped_engine_dies_with_a_killed_servediff(tmp_path: Path):
    parent = subprocess.Popen([sys.executable, "-c", SERVEDIFF, str(tmp_path / "e.log"),
                               str(free_port())], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pgid = int(parent.stdout.readline())
    for _ in range(300):  # the supervisor, bash and sleep
        if len(group_members(pgid)) == 3:
            break
        time.sleep(0.1)
    assert len(group_members(pgid)) == 3
    parent.kill()  # SIGKILL: servediff can run no code of its own
    parent.wait()
    parent.stdout.close()
    for _ in range(300):
        if not group_members(pgid):
            break
        time.sleep(0.1)
    assert group_members(pgid) == []  # bash and the sleep it wrapped went too


def test_a_stale_launch_is_stopped_only_if_it_started_after_the_launch(tmp_path: Path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                               start_new_session=True)
    try:
        # recorded as launched an hour after this process started: not ours, left alone
        later = stop_stale(sleeper.pid, time.time() + 3600, "127.0.0.1", free_port(),
                           tmp_path / "e.log", grace_s=1)
        assert later.found_alive is False and sleeper.poll() is None
        ours = stop_stale(sleeper.pid, time.time() - 60, "127.0.0.1", free_port(),
                          tmp_path / "e.log", grace_s=5)
        assert ours.found_alive is True and ours.at_resume and ours.group_gone
        assert sleeper.wait(timeout=30) == -signal.SIGTERM
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def test_an_engine_killed_by_sigkill_ends_its_supervisor_the_same_way(tmp_path: Path):
    # SGLang kills its own process tree with SIGKILL when a child fails; the supervisor
    # must end as the engine did, not with a traceback of its own (signal.signal refuses
    # SIGKILL), or the launch record quotes the supervisor's error instead of the engine's.
    port = free_port()
    proc = EngineProcess([sys.executable, "-c", "import os, signal; print('engine: bad', "
                          "flush=True); os.kill(os.getpid(), signal.SIGKILL)"], {},
                         tmp_path / "e.log", "127.0.0.1", port)
    proc.proc.wait(timeout=60)
    record = proc.stop(grace_s=5)
    assert record.died_before_stop and record.signal == "SIGKILL"
    log = (tmp_path / "e.log").read_text()
    assert "engine: bad" in log and "Traceback" not in log


def test_the_supervisor_runs_whatever_the_engine_s_pythonpath(tmp_path: Path):
    # an engine installed in a folder of its own gets a PYTHONPATH without servediff on
    # it (on the H200, SGLang's wheels): the supervisor still starts, the engine sees
    # exactly that PYTHONPATH
    own = tmp_path / "engine-site"
    own.mkdir()
    proc = EngineProcess([sys.executable, "-c", "import os; print('path', "
                          "os.environ['PYTHONPATH'], flush=True)"], {"PYTHONPATH": str(own)},
                         tmp_path / "e.log", "127.0.0.1", free_port())
    proc.proc.wait(timeout=60)
    record = proc.stop(grace_s=5)
    assert record.returncode == 0
    assert f"path {own}" in (tmp_path / "e.log").read_text()


def test_an_interrupt_while_an_engine_stops_waits_for_the_record():
    # a budget's SIGINT that lands while an engine takes seconds to stop must not cut the
    # stop short: the block ends, then the interrupt is raised
    import os

    from servediff.launch import interrupts_deferred

    done = []
    before = signal.getsignal(signal.SIGINT)  # another test may have set its own
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        done.append("recorded")
    assert done == ["recorded"]
    assert signal.getsignal(signal.SIGINT) is before
    with interrupts_deferred():  # nothing held: nothing raised
        done.append("again")
    assert done == ["recorded", "again"]
