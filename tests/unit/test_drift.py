from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence, verify
from servediff.derived import write_derived
from servediff.errors import IntegrityError, SchemaVersionError
from servediff.report.words import gap_text, signature_text
from tests.fixtures.bundles import cell, make_bundle


def stable(arm: str, load: int, shifts=None, rep_shifts=None, launch=1):
    return [cell(arm, load, shifts=shifts), cell(arm, load, "repeat", 1, launch=launch,
                                                 shifts=rep_shifts if rep_shifts is not None
                                                 else shifts)]


def test_bit_identical_arm_and_across_load_only_arm(tmp_path: Path):
    cells = stable("a", 1) + stable("a", 2)
    cells += stable("b", 1) + stable("b", 2, shifts={"beta": 0.5, "gamma": -0.25})
    summary = summarize(read_evidence(make_bundle(tmp_path, cells)))
    a, b = summary.arms["a"], summary.arms["b"]
    assert a.signature.name == "bit-identical"
    assert signature_text(b.signature) == "across-load only"
    pair = b.across_load[0]
    assert (pair.moved, pair.compared) == (2, 4)
    assert pair.max_abs_delta == 0.5 and pair.max_tag == "beta"
    assert pair.moved_tags == ["beta", "gamma"]
    assert [w.moved for w in b.within_load] == [0, 0]
    assert b.loads[0].perplexity != b.loads[1].perplexity
    # a and b share identical first loads: no arm shift
    assert summary.arm_shifts[0].moved == 0
    assert summary.arm_shifts[0].bit_identical
    assert summary.arm_shifts[0].signature == "no arm shift"
    assert summary.arm_shifts[0].reload_discordant.model_dump() == {
        "texts": 4, "moved_in_a_only": 0, "moved_in_b_only": 2, "mcnemar_p": 0.5}
    assert pair.moved_ci95[0] > 0.0 and pair.moved_ci95[1] < 1.0


def test_within_load_signature_and_arm_shift(tmp_path: Path):
    cells = stable("a", 1, rep_shifts={"delta": 1e-9}) + stable("a", 2)
    cells += stable("b", 1, shifts={"alpha": 0.01}) + stable("b", 2, shifts={"alpha": 0.01})
    summary = summarize(read_evidence(make_bundle(tmp_path, cells)))
    assert signature_text(summary.arms["a"].signature) == "within-load"
    assert summary.arms["a"].within_load[0].moved_tags == ["delta"]
    assert summary.arms["b"].signature.name == "bit-identical"
    shift = summary.arm_shifts[0]
    assert (shift.arm_a, shift.arm_b, shift.moved, shift.max_tag) == \
        ("a", "b", 1, "alpha")
    # arm a drifts within a load, so the difference is not a clean arm shift
    assert shift.signature == "arms differ and an arm drifts"


def test_clean_arm_shift(tmp_path: Path):
    cells = stable("a", 1) + stable("a", 2)
    cells += stable("b", 1, shifts={"gamma": 0.1}) + stable("b", 2, shifts={"gamma": 0.1})
    summary = summarize(read_evidence(make_bundle(tmp_path, cells)))
    assert summary.arm_shifts[0].signature == "arm shift"
    assert summary.arm_shifts[0].moved_tags == ["gamma"]


def test_threshold_turns_tiny_moves_into_stable(tmp_path: Path):
    cells = stable("a", 1) + stable("a", 2, shifts={"beta": 1e-6})
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",),
                                                  threshold=1e-3)))
    assert summary.arms["a"].signature.name == "stable within threshold"
    assert summary.arms["a"].across_load[0].moved == 0
    assert not summary.arms["a"].across_load[0].bit_identical


def test_repeat_from_another_launch_is_not_called_within_load(tmp_path: Path):
    cells = stable("a", 1, rep_shifts={"beta": 0.3}, launch=2) + stable("a", 2)
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",))))
    arm = summary.arms["a"]
    assert [x.model_dump() for x in arm.within_load_skipped] == [
        {"load": 1, "repeat": 1, "reason": "different launches"}]
    assert arm.signature.name == "bit-identical"


def test_invalid_rows_are_counted_and_left_out(tmp_path: Path):
    cells = [cell("a", 1, status={"gamma": "invalid"}), cell("a", 2)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, arms=("a",), repeats=0)))
    assert summary.invalid_rows == 1
    assert summary.arms["a"].across_load[0].compared == 3
    assert "within-load drift: no repeat probe was run" in [gap_text(g) for g in summary.gaps]


def test_missing_loads_and_untested_probes_are_listed(tmp_path: Path):
    summary = summarize(read_evidence(make_bundle(tmp_path, [cell("a", 1)], arms=("a",))))
    assert summary.arms["a"].signature.name == "not measured"
    assert "a: 1 of 2 planned loads have a score cell" in [gap_text(g) for g in summary.gaps]
    assert {"concurrency", "speed", "sweep", "prefix", "capacity", "generate"} <= \
        set(summary.untested)


def test_verify_names_a_changed_byte(tmp_path: Path):
    root = make_bundle(tmp_path, stable("a", 1) + stable("a", 2), arms=("a",))
    write_derived(root)
    assert verify(root) > 0
    target = root / "cells" / "a-load2-score.json"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 1
    target.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="cells/a-load2-score.json: sha256 does not match"):
        verify(root)


def test_verify_names_missing_and_extra_files(tmp_path: Path):
    root = make_bundle(tmp_path, stable("a", 1), arms=("a",), loads=1)
    (root / "cells" / "a-load1-repeat-r1.json").unlink()
    (root / "cells" / "stray.json").write_text("{}")
    with pytest.raises(IntegrityError) as info:
        verify(root)
    assert "a-load1-repeat-r1.json: missing" in str(info.value)
    assert "stray.json: not in the manifest" in str(info.value)


def test_unknown_schema_version_is_named(tmp_path: Path):
    root = make_bundle(tmp_path, stable("a", 1), arms=("a",), loads=1)
    path = root / "cells" / "a-load1-score.json"
    data = json.loads(path.read_text())
    data["schema_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaVersionError, match="a-load1-score.json: schema_version 99"):
        read_evidence(root)


def test_report_lists_what_was_not_tested(tmp_path: Path):
    root = make_bundle(tmp_path, stable("a", 1) + stable("a", 2), arms=("a",))
    write_derived(root)
    report = (root / "report.md").read_text()
    assert "## Not tested" in report
    for probe in ("concurrency", "speed", "sweep", "prefix", "capacity", "generate"):
        assert f"`{probe}`" in report
    assert "### Arm `a`: bit-identical" in report


def test_a_schema_1_cell_is_read_as_schema_2(tmp_path: Path):
    """Raw schema 1 kept a batch cell's size in `repeat` and the prefix probe's rows in a
    `prefix` field; the same bundle written in schema 1 gives the same summary."""
    from servediff.probes.prefix import PrefixSample, prefix_arm
    from tests.fixtures.bundles import prefix_cell

    cells = [*stable("a", 1), cell("a", 1, "batch", batch_size=4, shifts={"beta": 0.5}),
             *stable("a", 2)]
    root = make_bundle(tmp_path / "new", cells, arms=("a",))
    new = summarize(read_evidence(root))
    assert [(p.batch_size, p.moved) for p in new.arms["a"].batch_size] == [(4, 1)]
    path = root / "cells" / "a-load1-batch-b4.json"
    data = json.loads(path.read_text())
    assert (data["schema_version"], data["repeat"], data["batch_size"]) == (2, 0, 4)
    old = dict(data, schema_version=1, repeat=4)
    del old["batch_size"]
    path.write_text(json.dumps(old))
    assert summarize(read_evidence(root)).arms == new.arms

    prefix = prefix_cell("a", 1, ttft=[0.9, 0.2, 0.2], cached=[0, 4096, 4096])
    written = prefix.model_dump(mode="json")
    schema_1 = dict(written, schema_version=1, prefix=written.pop("data"))
    read = type(prefix).model_validate(schema_1)
    assert read.data == prefix.data and read.observations == 3
    assert prefix_arm([read]) == prefix_arm([prefix])
    assert prefix_arm([read]).later_cached_tokens == 4096
    assert [PrefixSample.model_validate(r).index for r in read.data] == [0, 1, 2]
