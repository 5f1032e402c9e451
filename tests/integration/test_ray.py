"""A plan of two independent comparisons on a real two-node Ray cluster on this machine
(ray.cluster_utils.Cluster: two raylets with one CPU slot each), on the embedded engine:
the same summary as the serial run, a worker killed mid-load recovered, Ctrl-C with
every engine stopped, and a resume that completes the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray
from ray.cluster_utils import Cluster

from servediff.evidence import Phase, load_name
from servediff.plan import resolve_plan
from servediff.runner import Runner, SilentObserver
from servediff.scale.ray_run import OnRay
from tests.fixtures.bundles import overlapping
from tests.integration.engines import (
    DRIFT_ONLY,
    MARK_BUSY,
    assert_all_stopped,
    probes_off,
    run_plan,
    servediff,
    servediff_running,
)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

# One drift load per arm: these tests check where loads run and how a lost worker, a lost
# node or Ctrl-C is recovered (across-load drift is checked by the serial runs of the
# other modules), and every load of the six runs here is an engine start.
PLAN = (
    'name = "two-rooms"\nengine = "transformers"\nmodel = "smollm2"\nloads_per_arm = 1\n'
    'comparisons = [["sdpa", "eager"], ["fp32", "bf16"]]\n'
    '[engine_options]\ndevice = "cpu"\nmax_model_len = 512\nthreads = 1\n'
    '[arms.sdpa]\noptions = { attn_implementation = "sdpa", dtype = "float32" }\n'
    '[arms.eager]\noptions = { attn_implementation = "eager", dtype = "float32" }\n'
    '[arms.fp32]\noptions = { dtype = "float32" }\n'
    '[arms.bf16]\noptions = { dtype = "bfloat16" }\n'
    "[corpus]\nmax_texts = 4\n[probes.repeat]\ncount = 1\n" + DRIFT_ONLY
)
# what differs between two runs of the same plan: the machine's state, commands (ports,
# the interpreter's path), start-up times
TIMINGS = {"conditions", "setup", "startup"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    yield nodes
    nodes.shutdown()


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_plan(tmp_path_factory.mktemp("serial"), PLAN)


def without_timings(value: Any, also: frozenset[str] = frozenset()) -> Any:
    if isinstance(value, dict):
        return {k: without_timings(v, also) for k, v in value.items()
                if k not in TIMINGS | also}
    if isinstance(value, list):
        return [without_timings(v, also) for v in value]
    return value


def same_drift(run: Path, serial: Path) -> bool:
    """The drift answer is the serial run's; a load measured again after a lost worker or
    an interrupt has its cells from its second launch."""
    relaunched = frozenset({"launch"})
    return (without_timings(summary(run)["arms"], relaunched)
            == without_timings(summary(serial)["arms"], relaunched))


def summary(run: Path) -> Any:
    return json.loads((run / "summary.json").read_text())


def launches(run: Path) -> list[dict[str, Any]]:
    return [x for p in sorted((run / "loads").glob("*.json"))
            for x in json.loads(p.read_text())["launches"]]


WORKER = os.environ.get("PYTEST_XDIST_WORKER")


def ours(proc: psutil.Process) -> bool:
    """Started under this test worker: the clusters these tests start, their Ray workers and
    the engines those start inherit its environment. The other worker's tests run engines
    of the same Python environment at the same time; another checkout's are not ours."""
    try:
        return proc.environ().get("PYTEST_XDIST_WORKER") == WORKER
    except psutil.Error:
        return False


def engines_alive() -> list[psutil.Process]:
    """Embedded engines of this Python environment and this test worker alive now (its other
    tests' engines are stopped by the time these run)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "servediff.engines.hf_server" in cmd and "servediff.engines.supervise" not in cmd \
                and Path(cmd[0]).parent == Path(sys.executable).parent and ours(proc):
            found.append(proc)
    return found


def with_plan(work: Path) -> Path:
    (work / "plan.toml").write_text(PLAN)
    return work


def start(work: Path, address: str) -> AbstractContextManager[subprocess.Popen[str]]:
    return servediff_running("run", "plan.toml", "--out", "run", "--ray", address,
                             cwd=with_plan(work), stderr=subprocess.STDOUT)


def wait_for_engine(driver: subprocess.Popen[str]) -> psutil.Process:
    """An engine of the run, once it has been up for a moment (a load mid-way)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and driver.poll() is None:
        if found := engines_alive():
            time.sleep(2.0)
            return found[0]
        time.sleep(0.2)
    raise AssertionError("no engine started")


def test_two_comparisons_on_two_nodes_give_the_serial_summary(tmp_path: Path,
                                                                cluster: Cluster,
                                                                serial: Path):
    done = servediff("run", "plan.toml", "--out", "run", "--ray", cluster.address,
                     cwd=with_plan(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    run = tmp_path / "run"
    assert without_timings(summary(run)) == without_timings(summary(serial))
    assert servediff("verify", str(run), cwd=tmp_path).returncode == 0
    # one room per comparison: each comparison's loads on one node, the two on two nodes
    nodes = {x["node"] for x in launches(run)}
    assert len(nodes) == 2 and None not in nodes
    for arms in (("sdpa", "eager"), ("fp32", "bf16")):
        assert len({x["node"] for a in arms
                    for x in json.loads((run / "loads" / f"{a}-load1.json").read_text())
                    ["launches"]}) == 1
    # each cell's conditions name the node its launch ran on
    node_of = {(p.stem, x["attempt"]): x["node"] for p in (run / "loads").glob("*.json")
               for x in json.loads(p.read_text())["launches"]}
    cells = [json.loads(p.read_text()) for p in (run / "cells").glob("*.json")]
    assert len(cells) >= 8 and all(
        c[when]["node"] == node_of[(load_name(c["arm"], c["load"], c["phase"]), c["launch"])]
        for c in cells for when in ("conditions", "conditions_after"))
    # arms of different comparisons are never compared
    shifts = {(s["arm_a"], s["arm_b"]) for s in summary(run)["arm_shifts"]}
    assert shifts == {("sdpa", "eager"), ("fp32", "bf16")}
    assert_all_stopped(run)
    assert engines_alive() == []


def test_a_worker_killed_mid_load_is_recorded_and_the_load_runs_again(tmp_path: Path,
                                                                       cluster: Cluster,
                                                                       serial: Path):
    with start(tmp_path, cluster.address) as driver:
        engine = wait_for_engine(driver)
        # the engine's supervisor, then the Ray worker that runs the load
        worker = next(p for p in engine.parents() if p.name().startswith("ray::"))
        worker.send_signal(signal.SIGKILL)
        output, _ = driver.communicate(timeout=900)
    assert driver.returncode == 0, output[-4000:]
    assert "the Ray worker running this load was lost" in output
    run = tmp_path / "run"
    lost = [x for x in launches(run) if x["error"] and "worker running this load was lost"
            in x["error"]]
    assert len(lost) == 1 and lost[0]["stop"] is not None
    # the load ran again; the drift answer is the serial run's
    assert summary(run)["cells"] == summary(serial)["cells"]
    assert same_drift(run, serial)
    assert_all_stopped(run)
    assert engines_alive() == []


def test_ctrl_c_stops_the_remote_engines_and_the_run_resumes(tmp_path: Path,
                                                             cluster: Cluster,
                                                             serial: Path):
    with start(tmp_path, cluster.address) as driver:
        wait_for_engine(driver)
        driver.send_signal(signal.SIGINT)
        output, _ = driver.communicate(timeout=600)
    assert driver.returncode == 130, output[-4000:]
    run = tmp_path / "run"
    interrupted = [x for x in launches(run) if x["error"] and "interrupted" in x["error"]]
    assert interrupted and all(x["stop"] is not None for x in interrupted)
    assert engines_alive() == []
    resumed = servediff("run", "plan.toml", "--out", "run", "--ray", cluster.address,
                        cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert summary(run)["cells"] == summary(serial)["cells"]
    assert same_drift(run, serial)
    assert_all_stopped(run)


def test_a_node_lost_mid_load_is_recorded_and_its_rooms_move_to_a_node_of_its_class(
        tmp_path: Path, serial: Path):
    # a cluster of its own: a head that runs no loads and a node of GPU model X that holds
    # both comparisons; once a load runs there, a second node of model X and one of model
    # Y join, and the first is lost. Its rooms must move to the X node, never to the Y one.
    # (Ray names a GPU node's model as the resource accelerator_type:<model>; these CPU
    # nodes are given one by hand.)
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    lost = nodes.add_node(num_cpus=2, resources={"accelerator_type:X": 1})
    nodes.wait_for_nodes()
    try:
        with start(tmp_path, nodes.address) as driver:
            wait_for_engine(driver)
            same = nodes.add_node(num_cpus=2, resources={"accelerator_type:X": 1})
            other = nodes.add_node(num_cpus=2, resources={"accelerator_type:Y": 1})
            nodes.wait_for_nodes()
            # an engine is still at work on the node when it goes (the load is lost mid-way)
            wait_for_engine(driver)
            nodes.remove_node(lost, allow_graceful=False)
            output, _ = driver.communicate(timeout=900)
    finally:
        nodes.shutdown()
    assert driver.returncode == 0, output[-4000:]
    run = tmp_path / "run"
    gone = [x for x in launches(run) if x["error"] and "its node cannot be reached"
            in x["error"]]
    assert gone and {x["node"] for x in gone} == {lost.node_id}
    # both comparisons finished on the node of the same model; the drift answer is the
    # serial one
    assert {x["node"] for x in launches(run)} == {lost.node_id, same.node_id}
    assert other.node_id not in {x["node"] for x in launches(run)}
    assert summary(run)["cells"] == summary(serial)["cells"]
    assert same_drift(run, serial)
    time.sleep(5)  # the lost node's engine ends with its Ray worker
    assert engines_alive() == []


def test_a_cost_load_runs_with_nothing_beside_it_on_its_node(tmp_path: Path):
    # one node with two slots: the two comparisons' drift loads share it, and each cost
    # load waits until the node is empty and keeps it empty while it runs
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    nodes.wait_for_nodes()
    cost = (probes_off("concurrency", "generate", "sweep", "prefix") + MARK_BUSY
            + "[probes.speed]\nprompt_tokens = [64]\nmax_tokens = 4\nreplicates = 1\n")
    plan = PLAN.replace("loads_per_arm = 1\n", "loads_per_arm = 1\ncost_loads_per_arm = 1\n"
                        ).replace(DRIFT_ONLY, cost)
    (tmp_path / "plan.toml").write_text(plan)
    try:
        done = servediff("run", "plan.toml", "--out", "run", "--ray", nodes.address,
                         cwd=tmp_path)
    finally:
        nodes.shutdown()
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    run = tmp_path / "run"
    assert len(launches(run)) == 8 and len({x["node"] for x in launches(run)}) == 1
    pairs = overlapping(run)
    # the node did run two loads at once (drift), never beside a cost load
    assert any("-load" in a and "-load" in b for a, b in pairs)
    assert [(a, b) for a, b in pairs if "-cost" in a + b] == []
    assert all(summary(run)["costs"][arm]["speed"] for arm in ("sdpa", "eager", "fp32", "bf16"))
    assert_all_stopped(run)
    assert engines_alive() == []


def run_toy(tmp_path: Path, on_ray: bool, address: str, observer: Recorder) -> None:
    """A `good` arm and a `bad` one whose engine (the toy server) refuses to start, one
    drift and one cost load each, run here or on the cluster."""
    model = tmp_path / "toy-model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"toy")
    raw = {"engine": "transformers", "model": "toy-model", "loads_per_arm": 1,
           "cost_loads_per_arm": 1,
           "arms": {"good": {}, "bad": {"args": ["--refuse", "no such mode here"]}},
           "corpus": {"max_texts": 2},
           "launch": {"command": [sys.executable, "-m", "tests.engines.toy", "--model",
                                  "{model}", "--host", "{host}", "--port", "{port}"],
                      "env": {"PYTHONPATH": str(ROOT)}},
           "quiet": {"gate_cost": False}}
    raw.update(tomllib.loads(probes_off("concurrency", "generate", "sweep", "prefix")))
    raw["probes"]["repeat"] = {"count": 0}
    raw["probes"]["speed"] = {"prompt_tokens": [16], "max_tokens": 2, "warmup": 0,
                              "replicates": 1, "levels": [1]}
    plan, corpus = resolve_plan(raw, "ray.toml", tmp_path)
    runner = Runner(plan, corpus, tmp_path / "run", tmp_path, observer,
                    placement=OnRay(address) if on_ray else None)
    try:
        runner.run()
    finally:
        ray.shutdown()


@pytest.mark.parametrize("on_ray", [False, True], ids=["here", "ray"])
def test_a_change_to_the_retry_rule_is_made_once_for_both_placements(
        tmp_path: Path, cluster: Cluster, monkeypatch: pytest.MonkeyPatch, on_ray: bool):
    """The retry rule lives in policy.py (LoadPolicy.again, taken by LoadTurns), and the
    runner's one load loop takes its launches from it whatever the placement: changed
    there to "one launch per load", the refused arm starts once per load, here and on the
    cluster (the plan's max_attempts is 2, so one refusal does not give the arm up and its
    cost load starts too)."""
    from servediff.policy import LoadPolicy

    monkeypatch.setattr(LoadPolicy, "again", lambda self, todo, unproductive:
                        bool(self.missing(todo)) and unproductive < 1)
    observer = Recorder()
    run_toy(tmp_path, on_ray, cluster.address, observer)
    starts = [e for e in observer.events if e[0] == "start"]
    assert [e for e in starts if e[1] == "bad"] == [("start", "bad", 1, "drift"),
                                                     ("start", "bad", 1, "cost")], starts
    for name in ("bad-load1", "bad-cost1"):
        record = json.loads((tmp_path / "run" / "loads" / f"{name}.json").read_text())
        assert [x["engine_refusal"] for x in record["launches"]] == [
            "ValueError: no such mode here"]
    assert sorted(p.stem for p in (tmp_path / "run" / "cells").glob("*.json")) == [
        "good-cost1-speed", "good-load1-score"]


class Recorder(SilentObserver):
    """The loads started and the drift answers shown, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def load_starting(self, arm: str, load: int, attempt: int, phase: Phase) -> None:
        self.events.append(("start", arm, load, phase))

    def drift_finished(self, done: list[str], pending: list[str]) -> None:
        self.events.append(("drift", tuple(done), tuple(pending)))


def test_the_ray_runner_announces_failed_drift_loads_before_its_cost_loads(
        tmp_path: Path, cluster: Cluster):
    """The local and the Ray runner share one load policy (policy.py): an arm whose drift
    loads failed (here its engine refused to start) is named as pending before the cost
    loads begin, and its own cost load does not start. The engine is the toy server
    (tests/engines/toy.py) launched in the embedded engine's place: a real process on the
    cluster's nodes that starts in about a second."""
    observer = Recorder()
    run_toy(tmp_path, True, cluster.address, observer)
    errors = [x["error"] for x in launches(tmp_path / "run") if x["error"]]
    events = observer.events
    # (a launch of `good` that failed for a reason of the machine's is started again:
    # the order below holds whatever the number of launches)
    cost = events.index(("start", "good", 1, "cost"))
    last_bad = max(i for i, e in enumerate(events) if e[:2] == ("start", "bad"))
    assert [e for e in events if e[:2] == ("start", "bad")] == \
        [("start", "bad", 1, "drift")] * 2, errors
    assert last_bad < cost - 1 and events[cost - 1] == ("drift", ("good",), ("bad",)), events
    assert events.count(("drift", ("good",), ("bad",))) == 2, events
    assert cost == len(events) - 1 or all(e[0] == "start" and e[1:3] == ("good", 1)
                                           for e in events[cost + 1:]), events
    assert sorted(p.stem for p in (tmp_path / "run" / "cells").glob("*.json")) == [
        "good-cost1-speed", "good-load1-score"]
    refused = json.loads((tmp_path / "run" / "loads" / "bad-load1.json").read_text())
    assert [x["engine_refusal"] for x in refused["launches"]] == \
        ["ValueError: no such mode here"] * 2
