"""A resume does not trust a damaged cell: cut short, it is measured again; edited, the run
stops and names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff.bundle import verify
from servediff.errors import IntegrityError
from tests.engines.fake import FakeLauncher
from tests.unit.test_runner import plan, run


def test_a_truncated_cell_is_moved_aside_and_measured_again(tmp_path: Path):
    the_plan = plan(tmp_path, arms={"a": {}}, loads_per_arm=1)
    root = run(tmp_path, FakeLauncher(), the_plan)
    cell = root / "cells" / "a-load1-score.json"
    whole = cell.read_bytes()
    cell.write_bytes(whole[: len(whole) // 2])  # cut short, as an interrupted copy leaves it
    launcher = FakeLauncher()
    run(tmp_path, launcher, the_plan)
    assert len(launcher.launched) == 1  # the load ran again for the one cell
    again = json.loads(cell.read_text())
    assert [r["tag"] for r in again["records"]] == \
        [r["tag"] for r in json.loads(whole)["records"]]
    assert (root / ".damaged" / "a-load1-score.json").read_bytes() == whole[: len(whole) // 2]
    assert verify(root) > 0


def test_a_cell_edited_by_hand_stops_the_resume_and_is_named(tmp_path: Path):
    the_plan = plan(tmp_path, arms={"a": {}}, loads_per_arm=1)
    root = run(tmp_path, FakeLauncher(), the_plan)
    cell = root / "cells" / "a-load1-score.json"
    data = json.loads(cell.read_text())
    data["records"][0]["sum_nll"] += 1.0
    cell.write_text(json.dumps(data))
    edited = cell.read_bytes()
    launcher = FakeLauncher()
    with pytest.raises(IntegrityError, match=r"cells/a-load1-score.json; restore them"):
        run(tmp_path, launcher, the_plan)
    assert launcher.launched == [] and cell.read_bytes() == edited
    with pytest.raises(IntegrityError):  # and the manifest still says it was changed
        verify(root)
