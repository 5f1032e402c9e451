"""Atomic file writes: temp file in the same folder, fsync, rename.

Every file servediff writes goes through here, so an interrupted run leaves
either the old file or the new one, never half of one.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from servediff.errors import DiskFullError

# No room on the device, or over the user's quota: either way nothing can be written
# until space is freed.
FULL = (errno.ENOSPC, errno.EDQUOT)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all; a full disk is a DiskFullError that names it."""
    try:
        _write(path, data)
    except OSError as exc:
        if exc.errno not in FULL:
            raise
        raise DiskFullError(
            f"no space left to write {path} ({os.strerror(exc.errno)}): servediff stopped "
            "here and every file it finished is kept; free space on that device and run "
            "the same command again to resume") from exc


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open would.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def dumps(obj: Any) -> str:
    """Canonical JSON: sorted keys, floats as Python's shortest round-trip repr."""
    return json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, obj: Any) -> None:
    write_text(path, dumps(obj))
