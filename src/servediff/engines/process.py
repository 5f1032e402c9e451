"""One engine process: start it in its own process group, watch it, stop it for sure.

Stopping is part of measuring: TERM to the whole group, KILL after a grace
period, then the port must refuse connections. A process that exited before
it was asked to is recorded as such (a crash is a measurement).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Protocol

import psutil

from servediff import gpu
from servediff.engines.groups import group_members
from servediff.evidence import Stop

LOG_TAIL_BYTES = 4000


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _die_with_parent() -> None:
    # If servediff itself is killed (-9), the engine must not outlive it and
    # hold the port or the GPU; PR_SET_PDEATHSIG = 1.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


# The last line of a Python traceback or an error line a server prints as it gives up.
ERROR_LINE = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?((?:[\w.]+(?:Error|Exception|Exit)|error|ERROR|"
                        r"Error|FATAL|fatal)\b:?.*\S)\s*$", re.MULTILINE)


# The supervisor imports servediff from where this servediff was imported, whatever the
# engine's own PYTHONPATH (an engine installed in a folder of its own puts that first, and
# its child gets that environment unchanged).
SUPERVISOR = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
              "from servediff.engines.supervise import main; main(sys.argv[1:])")


def engine_message(log_text: str) -> str:
    """What an engine that gave up said about why: its last error line, else its last line."""
    found = ERROR_LINE.findall(log_text)
    if found:
        return str(found[-1]).strip()
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    return lines[-1] if lines else "(the engine printed nothing)"


def created_at(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), or None if it is gone."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _still(pgid: int, pids: list[int]) -> list[int]:
    """Those of `pids` still alive in group `pgid`."""
    alive = set(group_members(pgid))
    return [pid for pid in pids if pid in alive]


def stop_stale(pgid: int, started_at: float, host: str, port: int, log_path: Path,
               grace_s: float, settle_s: float = 10.0) -> Stop:
    """Stop what is left of a launch whose servediff ended without stopping it.

    Only processes of its group that started after the launch did are touched, so a
    process that reuses one of its pids later is left alone."""
    t0 = time.monotonic()
    mine = [pid for pid in group_members(pgid)
            if (born := created_at(pid)) is not None and born >= started_at - 1.0]
    needed_kill = False
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, settle_s)):
        left = _still(pgid, mine)
        if not left:
            break
        needed_kill = sig == signal.SIGKILL
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while _still(pgid, mine) and time.monotonic() < deadline:
            time.sleep(0.1)
    deadline = time.monotonic() + settle_s
    while mine and port_open(host, port) and time.monotonic() < deadline:
        time.sleep(0.1)
    return Stop(died_before_stop=not mine, returncode=None, signal=None,
                needed_kill=needed_kill, stop_seconds=round(time.monotonic() - t0, 3),
                port_closed=not port_open(host, port),
                group_gone=not _still(pgid, mine),
                log_tail=tail(log_path), at_resume=True, found_alive=bool(mine))


class EngineHandle(Protocol):
    """What the runner needs of a started engine (`EngineProcess`, or a fake in tests)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    log_path: Path
    started_at: float

    def alive(self) -> bool: ...

    def exited_within(self, seconds: float) -> bool: ...

    def exit_status(self, wait_s: float) -> tuple[int | None, str | None] | None: ...

    def stop(self, grace_s: float) -> Stop: ...


class Launcher(Protocol):
    """Starts an engine: `EngineProcess` itself, or a fake in tests."""

    def __call__(self, argv: list[str], env: dict[str, str], log_path: Path, host: str,
                 port: int) -> EngineHandle: ...


class EngineProcess:
    """An engine started under the supervisor in a session of its own: alive, exit code,
    and a stop that takes its whole process group down and records how."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path,
                 host: str, port: int) -> None:
        self.argv = argv
        self.host = host
        self.port = port
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = log_path.open("ab")
        self.started_at = time.time()
        # The supervisor runs `argv` in this new process group and takes the whole group
        # down when told to stop or when servediff dies (engines/supervise.py).
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SUPERVISOR, "--", *argv],
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exited_within(self, seconds: float) -> bool:
        """Wait up to `seconds` for the process to end on its own. A client can see the
        connection reset a moment before the dying process is reaped."""
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def exit_status(self, wait_s: float) -> tuple[int | None, str | None] | None:
        """(exit code, signal name) if the process ended within `wait_s`, else None."""
        if not self.exited_within(wait_s):
            return None
        rc = self.proc.returncode
        return rc, signal.Signals(-rc).name if rc is not None and rc < 0 else None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def stop(self, grace_s: float, settle_s: float = 10.0) -> Stop:
        """TERM the group, KILL after `grace_s`; then wait up to `settle_s` for the port,
        the group's processes and their GPU memory to go."""
        t0 = time.monotonic()
        died_before = self.proc.poll() is not None
        members = set(group_members(self.proc.pid)) | {self.proc.pid}
        gpu_before = gpu.memory_by_pid(members)
        needed_kill = False
        if not died_before:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                needed_kill = True
                self._signal_group(signal.SIGKILL)
                self.proc.wait(timeout=30)
        # Workers the engine forked may still hold the group; make sure they go.
        self._signal_group(signal.SIGKILL)
        deadline = time.monotonic() + settle_s
        while port_open(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.1)
        while group_members(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        gpu_after = gpu.memory_by_pid(members) if gpu_before else gpu_before
        while gpu_after and time.monotonic() < deadline:
            time.sleep(0.5)
            gpu_after = gpu.memory_by_pid(members)
        self._log.close()
        rc = self.proc.returncode
        return Stop(
            died_before_stop=died_before,
            returncode=rc,
            signal=signal.Signals(-rc).name if rc is not None and rc < 0 else None,
            needed_kill=needed_kill,
            stop_seconds=round(time.monotonic() - t0, 3),
            port_closed=not port_open(self.host, self.port),
            group_gone=not group_members(self.proc.pid),
            gpu_memory_before_mb=gpu_before,
            gpu_memory_after_mb=gpu_after,
            gpu_memory_released=None if gpu_after is None else not gpu_after,
            log_tail=tail(self.log_path),
        )

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)
