"""A run whose disk fills up mid-load: one clear line, its own exit code, a clean resume.

The run directory lives on a real small filesystem (a 64 MiB tmpfs, mounted for the
test; this needs root). Once the first cell is written the test fills what is left of
it, so the next cell, record or manifest servediff writes finds no space. servediff must
stop with one line naming the file and exit 4, with the engine stopped, nothing half
written and no finished cell changed; once the filler is deleted the same command
resumes to completion and the bundle verifies. Where no tmpfs can be mounted (not
root) the same OS error is raised at the write instead (`nospace.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servediff.engines.process import group_members
from tests.integration.engines import DRIFT_ONLY, assert_all_stopped, servediff

pytestmark = pytest.mark.integration

PLAN = """
engine = "transformers"
model = "smollm2"
loads_per_arm = 2
[engine_options]
device = "cpu"
[arms.a]
[corpus]
tags = ["prose-short-storm", "json-event"]
[probes.repeat]
count = 1
""" + DRIFT_ONLY


@contextlib.contextmanager
def small_disk(where: Path) -> Iterator[bool]:
    """A 64 MiB tmpfs at `where` (True), or just the folder when mounting is not allowed
    (False: the test injects the error instead)."""
    where.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)],
        capture_output=True, check=False).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of the filesystem at `disk`."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 4096, 1):  # big blocks, then what is left of the last one
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_stops_the_run_with_one_line_and_the_same_command_resumes(tmp_path: Path):
    disk = tmp_path / "disk"
    with small_disk(disk) as mounted:
        (disk / "plan.toml").write_text(PLAN)
        run = disk / "run"
        first = run / "cells" / "a-load1-score.json"
        trigger = tmp_path / "full"
        command = [sys.executable, "-m", "servediff", "run", "plan.toml", "--out", "run"]
        if not mounted:  # the OS error at the write, once the trigger file exists
            command = [sys.executable, "-m", "tests.integration.nospace", str(trigger),
                       *command[3:]]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen(command, cwd=disk, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 900
            while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert first.exists(), "the first cell was never written"
            kept = first.read_bytes()
            filler = fill(disk) if mounted else trigger
            trigger.touch()
            _, err = proc.communicate(timeout=900)
        finally:
            proc.kill()
            proc.wait()
        assert proc.returncode == 4, err[-3000:]
        lines = [x for x in err.splitlines() if x.startswith("error:")]
        assert len(lines) == 1 and "no space left to write" in lines[0], err[-3000:]
        assert "Traceback" not in err
        # the engine was stopped before servediff ended
        for path in (run / "loads").glob("*.json"):
            for launch in json.loads(path.read_text())["launches"]:
                assert group_members(launch["pgid"]) == []
        # nothing half-written: every cell there is whole JSON, the first one unchanged
        assert first.read_bytes() == kept
        for cell in (run / "cells").glob("*.json"):
            json.loads(cell.read_text())
        if mounted:
            assert not [p for p in run.rglob(".*.tmp")], "a temporary file was left"
        filler.unlink()
        trigger.unlink(missing_ok=True)

        done = servediff("run", "plan.toml", "--out", "run", cwd=disk)
        assert done.returncode == 0, done.stderr[-3000:]
        assert first.read_bytes() == kept
        assert sorted(p.stem for p in (run / "cells").glob("*.json")) == [
            f"a-load{n}-{c}" for n in (1, 2) for c in ("repeat-r1", "score")]
        assert servediff("verify", "run", cwd=disk).returncode == 0
        assert servediff("rederive", "run", cwd=disk).returncode == 0
        assert_all_stopped(run)

