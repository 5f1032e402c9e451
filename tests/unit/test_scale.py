"""Comparisons (groups of arms compared with each other) and the Ray driver's refusals;
the runs on a real two-node cluster are in tests/integration/test_ray.py."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence
from servediff.errors import InputError, PlanError
from servediff.plan import Plan, lock, resolve_plan
from servediff.scale.ray_run import check_resources, connect
from tests.fixtures.bundles import cell, make_bundle, speed_cell

FOUR = {"engine": "transformers", "model": "smollm2",
        "arms": {"a": {}, "b": {}, "c": {}, "d": {}}}


@pytest.mark.parametrize(("groups", "expected"), [
    ([["a", "b"], ["c", "x"]], "comparisons: no such arm 'x'; the arms are a, b, c, d"),
    ([["a", "b"], ["b", "c", "d"]], "in more than one: b"),
    ([["a", "b"], ["c"]], "in none: d"),
    ([["a", "b", "c", "d"], []], "every arm in exactly one non-empty group"),
])
def test_comparisons_name_what_is_wrong(tmp_path: Path, groups: list[list[str]],
                                        expected: str):
    with pytest.raises(PlanError) as info:
        resolve_plan({**FOUR, "comparisons": groups}, "p.toml", tmp_path)
    assert "p.toml: comparisons" in str(info.value) and expected in str(info.value)


def test_where_loads_run_is_not_part_of_the_locked_plan(tmp_path: Path):
    plan, corpus = resolve_plan(dict(FOUR), "p.toml", tmp_path)
    elsewhere, _ = resolve_plan({**FOUR, "scale": {"ray": "auto", "cpus_per_load": 2}},
                                "p.toml", tmp_path)
    assert lock(plan, corpus).sha256 == lock(elsewhere, corpus).sha256
    # the default comparisons are left out: a plan locked before they existed still checks
    assert "comparisons" not in lock(plan, corpus).canonical()["plan"]
    grouped, _ = resolve_plan({**FOUR, "comparisons": [["a", "b"], ["c", "d"]]}, "p.toml",
                              tmp_path)
    assert lock(grouped, corpus).sha256 != lock(plan, corpus).sha256
    assert plan.groups() == [["a", "b", "c", "d"]]
    assert grouped.groups() == [["a", "b"], ["c", "d"]]


def test_arms_are_compared_within_their_comparison_only(tmp_path: Path):
    arms = ("a", "b", "c", "d")
    cells = [cell(arm, 1, shifts={"alpha": 0.5} if arm in "bd" else None) for arm in arms]
    for arm in arms:
        for load in (1, 2):
            cells.append(speed_cell(arm, load, [100.0, 101.0, 99.0], [0.2, 0.21, 0.19]))
    root = make_bundle(tmp_path, cells, arms=arms, loads=1, cost=True,
                       comparisons=[["a", "b"], ["c", "d"]])
    summary = summarize(read_evidence(root))
    assert {(s.arm_a, s.arm_b) for s in summary.arm_shifts} == {("a", "b"), ("c", "d")}
    assert {(c.baseline, c.arm) for c in summary.comparisons} == {("a", "b"), ("c", "d")}
    assert {(p.baseline, p.arm) for p in summary.verdict.pairs} == {("a", "b"), ("c", "d")}
    # without comparisons every arm is compared with the first
    plain = summarize(read_evidence(make_bundle(tmp_path / "plain", cells, arms=arms,
                                                loads=1, cost=True)))
    assert {(p.baseline, p.arm) for p in plain.verdict.pairs} == {
        ("a", "b"), ("a", "c"), ("a", "d")}
    assert len(plain.arm_shifts) == 6


def test_without_ray_the_refusal_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(InputError, match=r"Ray is not installed here; install it with "
                                         r"pip install 'servediff\[ray\]'"):
        connect("auto")


def test_an_address_nothing_answers_at_is_refused_at_once():
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(InputError, match=f"--ray 127.0.0.1:{port}: no Ray cluster answers"):
        connect(f"127.0.0.1:{port}")
    with pytest.raises(InputError, match="expected auto, HOST:PORT or ray://HOST:PORT"):
        connect("somewhere")


class FakeRay:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self._nodes = nodes

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes


def test_no_node_with_the_gpus_a_load_asks_for_is_refused():
    ray = FakeRay([{"Alive": True, "NodeManagerAddress": "10.0.0.1",
                    "Resources": {"CPU": 16.0, "GPU": 1.0}},
                   {"Alive": False, "NodeManagerAddress": "10.0.0.2",
                    "Resources": {"CPU": 16.0, "GPU": 8.0}}])
    check_resources(ray, 4, 1)  # fits the first node
    with pytest.raises(InputError) as info:
        check_resources(ray, 4, 2)
    assert str(info.value) == (
        "scale: a load asks for 4 CPU and 2 GPU (scale.cpus_per_load, scale.gpus_per_load); "
        "no node of the cluster has that (10.0.0.1: 16 CPU, 1 GPU)")


def test_the_plan_scale_section_is_checked():
    with pytest.raises(ValueError, match="gpus_per_load"):
        Plan.model_validate({**FOUR, "scale": {"gpus_per_load": -1}})


def test_a_cost_load_has_its_node_to_itself():
    from collections import deque

    from servediff.runner import Lane
    from servediff.scale.ray_run import Group, node_allows

    class Job:
        def __init__(self, phase: str) -> None:
            self.phase = phase

    def placement(node: str, running: str | None = None, waits: str | None = None) -> Group:
        lane = Lane(arms=["a"], loads=deque([("a", 1, waits)] if waits else []),  # type: ignore[list-item]
                    running=running is not None)
        it = Group(lane, node=node)
        if running is not None:
            it.ref, it.job = object(), Job(running)  # type: ignore[assignment]
        return it

    me = placement("n1")
    # another comparison's drift load on the same node: a drift load may join, a cost
    # load waits; on another node, both may start
    same = [me, placement("n1", "drift"), placement("n2", "cost")]
    assert node_allows("drift", me, same) and not node_allows("cost", me, same)
    # beside a running cost load nothing starts
    beside_cost = [me, placement("n1", "cost")]
    assert not node_allows("drift", me, beside_cost) and not node_allows("cost", me, beside_cost)
    # alone on its node (or with idle placements) a cost load starts
    assert node_allows("cost", me, [me, placement("n1"), placement("n2", "drift")])
    # a cost load waiting on the node holds back new drift loads there (not elsewhere), and
    # two placements that both wait for a cost load do not hold each other back
    waiting = [me, placement("n1", waits="cost")]
    assert not node_allows("drift", me, waiting) and node_allows("cost", me, waiting)
    assert node_allows("drift", me, [me, placement("n2", waits="cost"),
                                     placement("n1", waits="drift")])
