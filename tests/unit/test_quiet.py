"""Conditions acted on: busy cells make no cost, a quiet machine gives an ordinary verdict,
and an effect that follows run order rather than arm is named."""

from __future__ import annotations

from pathlib import Path

from servediff.analysis.cost import order_effect
from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence
from servediff.evidence import Cell, Conditions, GpuReading, ProcessUse
from servediff.report.costs import conditions_lines
from servediff.report.words import claim_text
from tests.fixtures.bundles import cell, conditions, make_bundle, speed_cell

FAST, SLOW = [100.0, 101.0, 99.0], [80.0, 81.0, 79.0]


def busy(c: Cell) -> Cell:
    noisy = conditions().model_copy(update={"foreign_cpu_cores": 1.9, "foreign": [
        ProcessUse(pid=42, name="yes", cpu_cores=0.95)]})
    return c.model_copy(update={"conditions_after": noisy})


def speed_claims(root: Path) -> list:
    (pair,) = summarize(read_evidence(root)).verdict.pairs
    return [c for c in pair.claims if c.topic == "speed"]


def test_a_quiet_machine_gives_an_ordinary_cost_claim(tmp_path: Path):
    cells = [cell("a", 1), cell("b", 1)]
    cells += [speed_cell("a", n, FAST, [0.2, 0.21, 0.19]) for n in (1, 2)]
    cells += [speed_cell("b", n, SLOW, [0.2, 0.21, 0.19]) for n in (1, 2)]
    decode = [c for c in speed_claims(make_bundle(tmp_path, cells, loads=1, cost=True))
              if c.comparison.metric == "decode_tok_s"]
    assert [c.kind for c in decode] == ["cost"] and not decode[0].comparison.busy


def test_a_cell_measured_beside_a_busy_process_makes_no_cost(tmp_path: Path):
    cells = [cell("a", 1), cell("b", 1)]
    cells += [speed_cell("a", n, FAST, [0.2, 0.21, 0.19]) for n in (1, 2)]
    cells += [busy(speed_cell("b", 1, SLOW, [0.2, 0.21, 0.19])),
              speed_cell("b", 2, SLOW, [0.2, 0.21, 0.19])]
    root = make_bundle(tmp_path, cells, loads=1, cost=True)
    decode = [c for c in speed_claims(root) if c.comparison.metric == "decode_tok_s"]
    assert [c.kind for c in decode] == ["note"]
    assert decode[0].comparison.busy == ["cells/b-cost1-speed.json"]
    assert "measured on a busy machine" in claim_text(decode[0])
    summary = summarize(read_evidence(root))
    assert summary.conditions["b"].busy_cells == 1 and summary.conditions["a"].busy_cells == 0
    speed = summary.costs["b"].speed
    assert speed and "other processes used 1.90 CPU cores" in \
        speed.per_length[0].busy["cells/b-cost1-speed.json"][0]


def test_arms_measured_on_two_machines_of_one_host_name_make_no_cost(tmp_path: Path):
    # a run resumed with cross_machine = true on a new lease of the same image: the host
    # name is the same, the machine (its fingerprint) is not
    cells = [cell("a", 1), cell("b", 1)]
    cells += [speed_cell("a", n, FAST, [0.2, 0.21, 0.19]) for n in (1, 2)]
    cells += [speed_cell("b", n, SLOW, [0.2, 0.21, 0.19]) for n in (1, 2)]
    ready = {"a": 10.0, "b": 50.0}
    one = make_bundle(tmp_path / "one", cells, loads=1, cost=True, ready_s=ready,
                      rooms={"a": "0123456789abcdef", "b": "0123456789abcdef"})
    two = make_bundle(tmp_path / "two", cells, loads=1, cost=True, ready_s=ready,
                      rooms={"a": "0123456789abcdef", "b": "fedcba9876543210"})
    for root, kinds in ((one, {"cost"}), (two, {"note"})):
        (pair,) = summarize(read_evidence(root)).verdict.pairs
        timed_claims = [c for c in pair.claims if c.topic in ("speed", "startup")]
        assert {c.topic for c in timed_claims} == {"speed", "startup"}
        decode = [c for c in timed_claims if c.topic == "startup"
                  or c.comparison.metric == "decode_tok_s"]
        assert {c.kind for c in decode} == kinds, root
    speed, startup = sorted(decode, key=lambda c: c.topic)
    assert speed.comparison.rooms == ["vm #01234567 (no GPU)", "vm #fedcba98 (no GPU)"]
    assert "measured on 2 machines (vm #01234567 (no GPU); vm #fedcba98 (no GPU)): not a " \
        "cost or a gain" in claim_text(speed)
    assert "timed on 2 machines" in claim_text(startup)


def test_a_difference_within_the_noise_between_loads_is_no_cost(tmp_path: Path):
    # On the H200 (h200-ship-speed-noise) two arms that ran the same eager code differed
    # by 20 % in decode speed: replicates agree within a load, loads do not. The band over
    # the replicates excludes 0; the loads of the two arms overlap, so it is no cost.
    def arm(name: str, first: float, second: float) -> list[Cell]:
        return [timed(speed_cell(name, n, [x, x + 0.5, x - 0.5], [0.2, 0.21, 0.19]), at)
                for n, x, at in ((1, first, 1.0 if name == "a" else 2.0),
                                 (2, second, 4.0 if name == "a" else 3.0))]
    base = [cell("a", 1), cell("b", 1), *arm("a", 100.0, 96.0)]
    overlapping = base + arm("b", 97.0, 93.0)  # b's first load lies within a's two
    apart = base + arm("b", 90.0, 86.0)
    for root, kind in ((make_bundle(tmp_path / "overlap", overlapping, loads=1, cost=True),
                        "within noise"),
                       (make_bundle(tmp_path / "apart", apart, loads=1, cost=True), "cost")):
        (decode,) = [c for c in speed_claims(root) if c.comparison.metric == "decode_tok_s"]
        band = decode.comparison.difference_band95
        assert band is not None and band[1] < 0  # the replicates alone would say cost
        assert decode.kind == kind, root
    assert decode.comparison.load_means == [[100.0, 96.0], [90.0, 86.0]]
    (decode,) = [c for c in speed_claims(tmp_path / "overlap")
                 if c.comparison.metric == "decode_tok_s"]
    assert decode.comparison.loads_overlap
    assert "within the noise between loads: the cost loads overlap (means per load `a` " \
        "100, 96; `b` 97, 93)" in claim_text(decode)


def timed(c: Cell, at: float) -> Cell:
    return c.model_copy(update={"started_at": at})


def test_an_effect_that_follows_run_order_is_named(tmp_path: Path):
    # A B B A, and the machine slows down as the run goes on: the loads that ran last
    # are slow whatever their arm.
    a1 = timed(speed_cell("a", 1, [100.0, 100.5, 99.5], [0.2] * 3), 1.0)
    b1 = timed(speed_cell("b", 1, [99.0, 99.5, 98.5], [0.2] * 3), 2.0)
    b2 = timed(speed_cell("b", 2, [80.0, 80.5, 79.5], [0.2] * 3), 3.0)
    a2 = timed(speed_cell("a", 2, [81.0, 81.5, 80.5], [0.2] * 3), 4.0)
    arm, order = order_effect([a1, a2], [b1, b2], 512, "decode_tok_s") or (0.0, 0.0)
    assert abs(order) > abs(arm) and order > 15
    root = make_bundle(tmp_path, [cell("a", 1), cell("b", 1), a1, b1, b2, a2], loads=1,
                       cost=True)
    decode = [c for c in speed_claims(root) if c.comparison.metric == "decode_tok_s"]
    assert decode[0].comparison.follows_order
    assert "follows run order more than arm" in claim_text(decode[0])
    # an arm effect stays an arm effect
    b2_fast = timed(speed_cell("b", 2, [99.0, 99.5, 98.5], [0.2] * 3), 3.0)
    a2_fast = timed(speed_cell("a", 2, [100.0, 100.5, 99.5], [0.2] * 3), 4.0)
    arm, order = order_effect([a1, a2_fast], [b1, b2_fast], 512, "decode_tok_s") or (0, 0)
    assert abs(arm) >= abs(order)


def test_conditions_read_the_machine_and_name_other_processes():
    import os
    import signal
    import subprocess
    import sys
    import time

    from servediff.conditions import read_conditions

    # a busy process that is not ours (not a child of this process: its parent exits)
    started = subprocess.run(["bash", "-c", f"{sys.executable} -c 'while True: pass' "
                              "> /dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                             check=True)
    hog = int(started.stdout.strip())
    try:
        read_conditions()
        time.sleep(1.5)
        now = read_conditions()
    finally:
        os.kill(hog, signal.SIGKILL)
    assert now.host and now.cpu_count > 0 and now.mem_available_mb
    assert hog in {p.pid for p in now.foreign}
    assert (now.foreign_cpu_cores or 0) > 0.2


def test_each_arm_names_the_gpu_its_engine_computed_on(tmp_path: Path):
    # two arms on one machine with two GPUs, each engine (pid 7) on its own GPU, beside
    # another process (pid 9) on both: a cell read alone names its node and GPU
    def on(gpu: int) -> Conditions:
        gpus = [GpuReading(index=i, name="NVIDIA H200", compute_pids=[9, 7] if i == gpu else [9])
                for i in (0, 1)]
        return conditions().model_copy(update={"gpus": gpus, "engine_pids": [7],
                                               "node": "a1b2c3d4e5f6", "gpus_given": str(gpu)})

    cells = [cell("a", 1), cell("b", 1)]
    cells = [c.model_copy(update={"conditions": on(i)}) for i, c in enumerate(cells)]
    summary = summarize(read_evidence(make_bundle(tmp_path, cells, loads=1)))
    assert summary.conditions["a"].gpus_used == ["Ray node a1b2c3d4: GPU 0 (NVIDIA H200)"]
    assert summary.conditions["b"].gpus_used == ["Ray node a1b2c3d4: GPU 1 (NVIDIA H200)"]
    table = "\n".join(conditions_lines(summary))
    assert "| engine's GPUs |" in table and "GPU 1 (NVIDIA H200)" in table
