"""A room is the machine, not its host name: two leases of one image are two rooms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff import gpu, room
from servediff.bundle import write_manifest
from servediff.errors import BundleError
from tests.engines.fake import FakeLauncher
from tests.unit.test_runner import plan, run


def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, machine_id: str,
            uuids: list[str]) -> None:
    path = tmp_path / f"machine-id-{machine_id}"
    path.write_text(machine_id + "\n")
    monkeypatch.setattr(room, "MACHINE_ID", (path,))
    monkeypatch.setattr(gpu, "uuids", lambda: uuids)


def test_the_fingerprint_tells_machines_apart_that_share_a_host_name(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    machine(monkeypatch, tmp_path, "0123", ["GPU-aaaa"])
    first = room.here()
    machine(monkeypatch, tmp_path, "0123", ["GPU-bbbb"])  # the same image, another GPU
    second = room.here()
    machine(monkeypatch, tmp_path, "4567", ["GPU-aaaa"])
    third = room.here()
    assert first.host == second.host and first.gpu_models == second.gpu_models
    assert len({first.fingerprint, second.fingerprint, third.fingerprint}) == 3
    assert not first.same(second) and not first.same(third)
    # the machine id itself is never stored
    assert "0123" not in json.dumps(first.__dict__)
    # an older record without a fingerprint is no evidence of another machine
    assert room.Room(first.host, first.gpu_models, None).same(second)
    assert not room.Room("other-host", first.gpu_models, None).same(first)


def test_a_run_is_not_resumed_on_another_machine_of_the_same_host_name(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    machine(monkeypatch, tmp_path, "0123", ["GPU-aaaa"])
    the_plan = plan(tmp_path, arms={"a": {}}, loads_per_arm=1)
    root = run(tmp_path, FakeLauncher(), the_plan)
    recorded = json.loads((root / "loads" / "a-load1.json").read_text())["launches"][0]
    assert recorded["room_id"] == room.here().fingerprint
    assert recorded["boot_id"] == room.boot()
    run(tmp_path, FakeLauncher(), the_plan)  # the same machine: resumes (nothing to do)

    machine(monkeypatch, tmp_path, "0123", ["GPU-bbbb"])
    launcher = FakeLauncher()
    with pytest.raises(BundleError, match=r"measured on .*#[0-9a-f]{8}.*this machine is "
                                          r".*#[0-9a-f]{8}.*cross_machine = true"):
        run(tmp_path, launcher, the_plan)
    assert launcher.launched == []


def test_a_bundle_written_before_fingerprints_resumes_on_its_host(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    machine(monkeypatch, tmp_path, "0123", ["GPU-aaaa"])
    the_plan = plan(tmp_path, arms={"a": {}}, loads_per_arm=1)
    root = run(tmp_path, FakeLauncher(), the_plan)
    path = root / "loads" / "a-load1.json"
    data = json.loads(path.read_text())
    for launch in data["launches"]:
        del launch["room_id"], launch["boot_id"]
    path.write_text(json.dumps(data))
    write_manifest(root)
    machine(monkeypatch, tmp_path, "4567", ["GPU-bbbb"])
    run(tmp_path, FakeLauncher(), the_plan)  # no fingerprint recorded: the host decides
