"""Stopping an engine process: group, port, and the GPU-memory check around it."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from servediff import gpu
from servediff.engines import process
from servediff.engines.process import EngineProcess, free_port, group_members

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
        if process.port_open("127.0.0.1", port) and len(group_members(proc.pid)) == 2:
            break
        time.sleep(0.05)
    return proc


def test_stop_takes_the_whole_group_and_frees_the_port(tmp_path: Path):
    proc = start(tmp_path)
    assert len(group_members(proc.pid)) == 2
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
