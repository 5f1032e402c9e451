"""Five seeded kill trials (scripts/kill_trials.py): SIGKILL at seeded moments to
servediff, the engine's supervisor or the engine, then resumes until the run completes.
No cell lost or measured twice, no process or port left, verify and rederive pass.
The 50-trial table is in docs/reliability.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import kill_trials

pytestmark = pytest.mark.integration


def test_five_seeded_kill_trials_lose_nothing_duplicate_nothing_and_leave_nothing(
        tmp_path: Path):
    trials = [kill_trials.trial(n, seed=7, root=tmp_path) for n in range(1, 6)]
    assert kill_trials.failures(trials) == [], kill_trials.table(trials)
    assert all(t.faults for t in trials), kill_trials.table(trials)
    # the faults went to more than one target, and the runs were resumed after them
    assert len({f.target for t in trials for f in t.faults}) >= 2, kill_trials.table(trials)
    assert sum(t.attempts for t in trials) > len(trials), kill_trials.table(trials)
    for t in trials:
        assert sorted(p.stem for p in (tmp_path / f"trial-{t.number:03d}" / "run" / "cells")
                      .glob("*.json")) == kill_trials.EXPECTED
