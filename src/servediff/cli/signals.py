"""SIGINT and SIGTERM raised as KeyboardInterrupt, so that a command stops the engine and
records it before it ends."""

from __future__ import annotations

import signal


def _interrupt(signum: int, frame: object) -> None:
    # `kill` is handled like Ctrl-C: the engine is stopped and recorded first.
    raise KeyboardInterrupt


def interruptible() -> None:
    """Ctrl-C and `kill` stop the command as KeyboardInterrupt. SIGINT explicitly too: a
    shell that starts a command in the background hands it SIGINT ignored, and Python
    then leaves it ignored; an interrupt must still stop and record."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
