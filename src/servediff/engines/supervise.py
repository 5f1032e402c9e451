"""The process servediff starts for an engine: it runs the engine and takes its group down.

`python -m servediff.engines.supervise -- ARGV...` (process.SUPERVISOR: the same,
importable whatever the engine's PYTHONPATH) is started by servediff as
the leader of a new session and process group, with the kernel told to send
it SIGTERM when servediff dies (PR_SET_PDEATHSIG). It starts ARGV in the same
group and waits. When it is told to stop (servediff's TERM to the group, or
the parent-death signal after servediff was killed), it stops the whole
group: TERM, a grace period, then KILL. So an engine behind a wrapper that
does not `exec` (`bash -c "llama-server ...; echo done"`) dies with
servediff too, which PR_SET_PDEATHSIG alone cannot do: that signal reaches
only the direct child.

What this cannot guarantee, and what servediff does about it: a process
that leaves the group (its own `setsid`) escapes the group kill, and
nothing at all runs if the machine itself stops. Every `servediff run`
therefore first looks for launches without a stop record and stops what is
left of them (runner.py), recording "stopped at resume".

When the engine ends on its own, this process ends the same way: with the
engine's exit code, or killed by the same signal, so the load record says
how the engine died. And when this process is killed, the kernel kills the
engine it started (PR_SET_PDEATHSIG with SIGKILL on it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import time
from types import FrameType

from servediff.engines.groups import group_members

GRACE_S = 10.0
POLL_S = 0.2


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill_others(sig: signal.Signals) -> None:
    """`sig` to every process of our group but this one."""
    for pid in group_members(os.getpgrp()):
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def _end_like(returncode: int) -> None:
    """Exit as the engine did: its code, or killed by its signal."""
    if returncode >= 0:
        sys.exit(returncode)
    sig = -returncode
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of our own
    # SIGKILL and SIGSTOP take no handler (EINVAL); they end this process as they are
    with contextlib.suppress(OSError, ValueError):
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    sys.exit(128 + sig)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] != "--":
        sys.exit("usage: python -m servediff.engines.supervise -- COMMAND [ARG...]")
    try:
        # The engine dies with this process too, however this one ends (even SIGKILL).
        child = subprocess.Popen(argv[1:], preexec_fn=_die_with_parent)
    except OSError as exc:
        sys.stderr.write(f"servediff: cannot start {argv[1]!r}: {exc.strerror or exc}\n")
        sys.exit(127)
    stopping: list[float] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        # servediff stops the engine, or servediff died: the whole group goes
        if not stopping:
            stopping.append(time.monotonic())
            _kill_others(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        pid, status = os.waitpid(child.pid, os.WNOHANG)
        if pid:
            break
        if stopping and time.monotonic() - stopping[0] > GRACE_S:
            _kill_others(signal.SIGKILL)
        time.sleep(POLL_S)
    if stopping:
        _kill_others(signal.SIGKILL)  # workers the engine left behind
    _end_like(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1:])
