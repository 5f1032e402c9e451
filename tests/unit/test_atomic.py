"""Atomic writes on a full disk: a DiskFullError naming the file, nothing left behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from servediff import atomic
from servediff.errors import DiskFullError


def test_a_full_disk_is_named_and_leaves_the_old_file_and_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "cells" / "a-load1-score.json"
    atomic.write_text(path, "old\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(DiskFullError) as caught:
        atomic.write_text(path, "new\n")
    assert caught.value.exit_code == 4
    assert str(path) in str(caught.value) and "run the same command again" in str(caught.value)
    assert path.read_text() == "old\n"
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_other_write_errors_are_not_called_a_full_disk(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    def broken(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(atomic.os, "fsync", broken)
    with pytest.raises(OSError) as caught:
        atomic.write_text(tmp_path / "x.json", "{}\n")
    assert not isinstance(caught.value, DiskFullError) and caught.value.errno == errno.EIO
