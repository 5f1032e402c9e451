"""A run interrupted under an earlier servediff resumes under today's.

tests/fixtures/interrupted/run-24573b2.tar.gz was made by servediff at commit
24573b2 (before probes became one module each): plan.toml on the in-process
fake engine, stopped after 5 of its 12 cells (make.py). The run is the same
run under today's code as long as the plan is: a setting added since, at its
default, changes nothing; a real change is refused with the difference.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from servediff.bundle import read_evidence, verify
from servediff.errors import PlanMismatchError
from servediff.plan import digest, load_plan_file
from servediff.runner import Runner, SilentObserver
from tests.engines.fake import FakeLauncher
from tests.fixtures.interrupted.make import model_dir

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "interrupted"
BEFORE = ["a-load1-generate", "a-load1-repeat-r1", "a-load1-score", "b-load1-repeat-r1",
          "b-load1-score"]


def unpack(tmp_path: Path) -> tuple[Path, Path]:
    with tarfile.open(FIXTURE / "run-24573b2.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    model_dir(tmp_path)
    plan_file = tmp_path / "plan.toml"
    shutil.copy(FIXTURE / "plan.toml", plan_file)
    return tmp_path / "run", plan_file


def resume(run: Path, plan_file: Path) -> None:
    plan, corpus = load_plan_file(plan_file)
    launcher = FakeLauncher()
    Runner(plan, corpus, run, plan_file.parent, SilentObserver(), launcher=launcher,
           clients=launcher.client).run()


def cells(run: Path) -> list[str]:
    return sorted(p.stem for p in (run / "cells").glob("*.json"))


def test_a_run_interrupted_under_the_previous_commit_resumes_under_this_one(tmp_path: Path):
    run, plan_file = unpack(tmp_path)
    assert cells(run) == BEFORE
    kept = {name: (run / "cells" / f"{name}.json").read_bytes() for name in BEFORE}
    lock = (run / "plan.lock.json").read_bytes()
    resume(run, plan_file)
    assert cells(run) == sorted(f"{arm}-load{n}-{probe}" for arm in "ab" for n in (1, 2)
                                for probe in ("score", "repeat-r1", "generate"))
    # what the earlier servediff measured is kept as it was, and so is the run's identity
    assert {name: (run / "cells" / f"{name}.json").read_bytes() for name in BEFORE} == kept
    assert (run / "plan.lock.json").read_bytes() == lock
    # the launch the interrupt ended is recorded as such; the load ran again for its rest
    launches = json.loads((run / "loads" / "b-load1.json").read_text())["launches"]
    assert launches[0]["error"].startswith("interrupted")
    assert len(launches) == 2 and launches[1]["error"] is None
    assert verify(run) > 0  # raises naming any file that does not match the manifest
    assert read_evidence(run).locked.sha256 == json.loads(lock)["sha256"]


def test_a_lock_written_before_a_setting_existed_resumes_with_it_at_its_default(
        tmp_path: Path):
    run, plan_file = unpack(tmp_path)
    # as an older servediff that had no probes.prefix.question_tokens would have locked it
    path = run / "plan.lock.json"
    data = json.loads(path.read_text())
    del data["plan"]["probes"]["prefix"]["question_tokens"]
    data["sha256"] = digest({k: data[k] for k in ("plan", "arm_order", "corpus")})
    path.write_text(json.dumps(data))
    resume(run, plan_file)
    assert len(cells(run)) == 12
    assert json.loads(path.read_text())["sha256"] == data["sha256"]


def test_a_real_change_of_the_plan_is_refused_with_the_difference(tmp_path: Path):
    run, plan_file = unpack(tmp_path)
    plan_file.write_text(plan_file.read_text().replace("[probes.repeat]\ncount = 1",
                                                       "[probes.repeat]\ncount = 2"))
    with pytest.raises(PlanMismatchError) as refused:
        resume(run, plan_file)
    assert '-   "count": 1,\n+   "count": 2,' in str(refused.value)
    assert cells(run) == BEFORE
