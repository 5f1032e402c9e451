"""`python -m tests.integration.nospace TRIGGER ARGS...`: `servediff ARGS...` in which every
file write fails as on a full disk (ENOSPC at the write) once the file TRIGGER exists.
The full-disk test's stand-in for a real small filesystem where none can be mounted."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import servediff.atomic
from servediff.cli import main as servediff_main


def install(trigger: Path) -> None:
    real = servediff.atomic._write

    def write(path: Path, data: bytes) -> None:
        if trigger.exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    servediff.atomic._write = write


if __name__ == "__main__":
    install(Path(sys.argv[1]))
    servediff_main(sys.argv[2:])
