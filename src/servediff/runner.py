"""The measuring stage: walk the locked plan's schedule, one cold load at a time.

The runner locks the plan, works out which cells are still missing (so an
interrupted run resumes without redoing finished cells), resolves the model
once, and runs each load that has work left as an `EngineLaunch`: start cold,
hand each missing cell to its probe, stop and record. An engine that fails
to start or dies mid-load is recorded in the load record; the load is
started again for the cells it left, and the run goes on. Where launches run is
the runner's `Placement`: this machine (`Here`, one lane), or a Ray placement group per
comparison (scale/ray_run.py); the load loop and its retry rule (policy.py) are the
same for both. The launcher and the client factory are injected, so the whole schedule
runs against a fake in tests. The runner never prints: it reports to an `Observer`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from servediff import hub, models, room, secret_env
from servediff.bundle import (
    Layout,
    as_run,
    exclusive,
    read_record,
    write_lock,
    write_manifest,
)
from servediff.context import ClientFactory, Observer, RunContext, ServedModel, make_client
from servediff.corpus import Corpus
from servediff.engines import registry
from servediff.engines.base import EngineAdapter
from servediff.engines.process import EngineProcess, Launcher, stop_stale
from servediff.errors import (
    BundleError,
    DiskFullError,
    EngineError,
    IntegrityError,
    OutputDirError,
)
from servediff.evidence import (
    ENDED,
    INTERRUPTED,
    READABLE,
    Cell,
    LoadRecord,
    ModelSource,
    Phase,
)
from servediff.hub import HubId
from servediff.launch import EngineLaunch
from servediff.plan import Plan, lock
from servediff.policy import LoadPolicy, LoadTurns
from servediff.probes import by_cell
from servediff.probes.context import ProbeContext
from servediff.schedule import CellSpec, schedule


def ensure_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".servediff-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputDirError(f"{root}: output folder is not writable ({exc.strerror})") from None


def resolve_model(plan: Plan, adapter: EngineAdapter, base_dir: Path,
                  say: Callable[[str], None]) -> ServedModel:
    """The model as this engine serves it, its weight hashes, declared BOS id and source."""
    if plan.base_url is not None:
        return ServedModel(plan.model, {}, None,
                           ModelSource(given=plan.model, kind="endpoint", served=plan.model))
    if plan.model == "smollm2":
        path, hashes = (models.smollm2_gguf(say) if adapter.model_format == "gguf"
                        else models.smollm2_dir(say))
        kind: Literal["builtin", "path"] = "builtin"
    elif (named := models.hub_model(plan.model, base_dir)) is not None:
        return served_from_hub(plan.model, named, say)
    else:
        path = models.local_path(plan.model, base_dir).resolve()
        hashes = models.weight_hashes(path)
        kind = "path"
    return ServedModel(str(path), hashes, models.bos_token_id(path),
                       ModelSource(given=plan.model, kind=kind, served=str(path)))


def served_from_hub(given: str, named: HubId, say: Callable[[str], None]) -> ServedModel:
    """A hub id: its cached snapshot's folder and hashes, or the id itself when the cache
    does not hold that revision (the engine resolves it; nothing is hashed)."""
    source = ModelSource(given=given, kind="hub", served=named.repo, hub_repo=named.repo,
                         hub_revision=named.revision)
    snapshot = hub.cached(named)
    if snapshot is None:
        say(f"{given}: not in the local hub cache; the engine is given the id and its "
            "weights are not hashed")
        return ServedModel(named.repo, {}, None, source)
    say(f"{given}: hashing the weights of its cached snapshot {snapshot.commit[:12]}")
    source.served = str(snapshot.folder)
    source.hub_commit = snapshot.commit
    return ServedModel(str(snapshot.folder), models.weight_hashes(snapshot.folder),
                       models.bos_token_id(snapshot.folder), source)


def other_version(path: Path) -> bool:
    """A whole servediff file of another schema version (not a damaged one)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False
    version = data.get("schema_version") if isinstance(data, dict) else None
    return isinstance(version, int) and version not in READABLE


def check_cells(layout: Layout, say: Callable[[str], None]) -> None:
    """Before a resume trusts the cells an earlier run left: a cell that is not a whole
    cell (cut short, not JSON) is moved aside to `.damaged/` and measured again; one whose
    bytes differ from what the manifest recorded (edited by hand) stops the run, named.
    A cell written but not yet in the manifest (servediff killed between the two) was
    written atomically and is kept."""
    recorded: dict[str, str] = {}
    if layout.manifest.exists():
        try:
            recorded = json.loads(layout.manifest.read_text())["files"]
        except (ValueError, KeyError, TypeError):
            recorded = {}  # verify names a broken manifest; the cells are checked alone
    edited = []
    for path in layout.cells():
        name = str(path.relative_to(layout.root))
        try:
            read_record(path, Cell)
        except BundleError as exc:
            if other_version(path):
                raise  # a cell of another servediff: refused, as every reader does
            aside = layout.damaged(path.name)
            aside.parent.mkdir(exist_ok=True)
            os.replace(path, aside)
            say(f"{name}: not a whole cell ({exc}); moved to .damaged/ and measured again")
            continue
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        if name in recorded and recorded[name] != sha:
            edited.append(name)
    if edited:
        raise IntegrityError(
            f"{layout.root}: {len(edited)} cell(s) changed since servediff wrote them (sha256 "
            f"differs from manifest.json): {', '.join(edited)}; restore them, or delete them "
            "to have them measured again")


LoadKey = tuple[str, int, Phase]


@dataclass
class Lane:
    """Loads measured one after another, in the schedule's order: every load of a local
    run, or one comparison's on a cluster, where lanes run side by side."""

    arms: list[str]
    loads: deque[LoadKey]
    turns: LoadTurns | None = None  # the launches of the load at the head of `loads`
    running: bool = False

    def waiting(self) -> Phase | None:
        """The phase of the load this lane waits to start (None: one runs, or it is done)."""
        return self.loads[0][2] if not self.running and self.loads else None


class Measuring(Protocol):
    """A placement at work on a run's lanes."""

    def start(self, lane: Lane, key: LoadKey, todo: list[CellSpec]) -> bool:
        """Start the next launch of the load at the head of `lane` to measure `todo`;
        False while it must wait (its node is not ready, or not free for a cost load)."""

    def ended(self) -> list[Lane]:
        """The lanes whose launch has ended since the last call, its files in the bundle
        (a local launch has ended by the time `start` returns)."""


class Placement(Protocol):
    """Where a run's loads are measured: this machine (`Here`), or a Ray placement group
    per comparison (`scale.ray_run.OnRay`). The runner's one loop decides which launch
    comes next (the policy's retry rule); the placement runs it and says when it ended."""

    def open(self, context: RunContext) -> None:
        """Before anything is written: refuse a run this placement cannot measure."""

    def lanes(self, plan: Plan) -> list[list[str]]:
        """The arms of each lane."""

    def measuring(self, context: RunContext, base_dir: Path,
                  lanes: list[Lane]) -> AbstractContextManager[Measuring]:
        """The placement at work on `lanes` until the run's loads are done or it stops."""


class Here:
    """This machine: every load of the run one after another, in one lane. Every
    comparison is measured in one room: a run started on another machine (or another GPU
    model) is not continued here unless the plan says cross_machine."""

    def open(self, context: RunContext) -> None:
        here, layout = room.here(), context.layout
        seen = {room.of(x) for path in layout.loads()
                for x in read_record(path, LoadRecord).launches if x.machine is not None}
        if seen and not any(here.same(x) for x in seen) and not context.plan.cross_machine:
            there = ", ".join(sorted(x.label() for x in seen))
            raise BundleError(
                f"{layout.root}: its loads were measured on {there}; this machine is "
                f"{here.label()} (# is the fingerprint of its machine id and GPUs). A "
                "comparison is measured in one room: resume it there, or set "
                "cross_machine = true in the plan (both machines are then named in the "
                "report)")

    def lanes(self, plan: Plan) -> list[list[str]]:
        return [list(plan.arms)]

    @contextmanager
    def measuring(self, context: RunContext, base_dir: Path,
                  lanes: list[Lane]) -> Iterator[Measuring]:
        yield Local(context, resolve_model(context.plan, context.adapter, base_dir,
                                           context.observer.note))


class Local:
    """Launches measured here, each to its end before `start` returns."""

    def __init__(self, context: RunContext, model: ServedModel) -> None:
        self.context, self.model = context, model
        self.done: list[Lane] = []

    def start(self, lane: Lane, key: LoadKey, todo: list[CellSpec]) -> bool:
        measure_load(self.context, *key, todo, self.model)
        self.done.append(lane)
        return True

    def ended(self) -> list[Lane]:
        done, self.done = self.done, []
        return done


class Runner:
    """The run of a locked plan: its loads in the schedule's order, in the lanes of its
    placement (this machine unless another is given)."""

    def __init__(self, plan: Plan, corpus: Corpus, root: Path, base_dir: Path,
                 observer: Observer, launcher: Launcher = EngineProcess,
                 clients: ClientFactory = make_client,
                 placement: Placement | None = None) -> None:
        self.context = RunContext(plan=plan, corpus=corpus,
                                  adapter=registry.create(plan.engine), layout=Layout(root),
                                  observer=observer, launcher=launcher, clients=clients)
        self.base_dir = base_dir
        self.placement: Placement = placement or Here()
        self.policy = LoadPolicy(plan, self.context.layout, observer)
        # the plan as locked; the one measured adds a design's confirmation arm once the
        # run directory says which (bundle.as_run)
        self.locked_plan = plan

    @property
    def layout(self) -> Layout:
        return self.context.layout

    def run(self) -> None:
        # refused before anything is written: another machine's run, no Ray cluster
        self.placement.open(self.context)
        ensure_writable(self.layout.root)
        with exclusive(self.layout.root):
            self._run()

    def reap(self) -> None:
        """Launches that a servediff killed before it could stop them: what is left of
        their engines is stopped now, and the stop is recorded as one at resume."""
        context = self.context
        for path in self.layout.loads():
            record = read_record(path, LoadRecord)
            stale = [x for x in record.launches if x.stop is None and not x.external and x.pid]
            for launch in stale:
                launch.stop = stop_stale(launch.pgid or launch.pid, launch.started_at,
                                         launch.host, launch.port,
                                         self.layout.log(record.name),
                                         context.plan.launch.stop_grace_s)
                hidden = secret_env.hidden(launch.env_diff)
                secret_env.redact_file(self.layout.log(record.name), hidden)
                launch.stop.log_tail = secret_env.redact(launch.stop.log_tail, hidden)
                launch.error = launch.error or ENDED
                launch.finished_at = launch.finished_at or time.time()
                context.observer.note(
                    f"{record.name} launch {launch.attempt} had no stop record: "
                    + ("its engine was still running and is now stopped" if
                       launch.stop.found_alive else "its engine had already ended"))
            if stale:
                context.write_load(record)
        write_manifest(self.layout.root)

    def _run(self) -> None:
        context = self.context
        check_cells(self.layout, context.observer.note)
        self.reap()
        write_lock(self.layout.root, lock(self.locked_plan, context.corpus))
        write_manifest(self.layout.root)
        context.plan = self.policy.plan = as_run(self.layout.root, self.locked_plan)
        policy = self.policy
        todo = {x: cells for x in schedule(context.plan) if (cells := policy.todo(*x))}
        if not todo:
            context.observer.note("every cell of this plan is already measured; nothing to run")
            return
        pending = list(todo)
        context.observer.run_starting(len(pending), sum(map(len, todo.values())))
        policy.begin(pending[0][2])
        self.measure(pending)

    def measure(self, pending: list[LoadKey]) -> None:
        """The one load loop: each lane's pending loads in the schedule's order, the lanes
        side by side; each load's launches as the policy allows."""
        lanes = [Lane(arms, deque(x for x in pending if x[0] in arms))
                 for arms in self.placement.lanes(self.context.plan)]
        lanes = [lane for lane in lanes if lane.loads]
        with self.placement.measuring(self.context, self.base_dir, lanes) as measuring:
            while any(lane.loads for lane in lanes):
                for lane in lanes:
                    self.advance(lane, measuring)
                for lane in measuring.ended():
                    assert lane.turns is not None
                    lane.running = False
                    lane.turns.ended()

    def advance(self, lane: Lane, measuring: Measuring) -> None:
        """Start the lane's next launch, passing over the loads that are over."""
        while not lane.running and lane.loads:
            key = lane.loads[0]
            if lane.turns is None:
                lane.turns = self.policy.turns(*key)
            todo = lane.turns.next()
            if todo is None:
                lane.loads.popleft()
                lane.turns = None
                continue
            lane.running = measuring.start(lane, key, todo)
            if not lane.running:
                return


def measure_load(context: RunContext, arm: str, load: int, phase: Phase,
                 todo: list[CellSpec], model: ServedModel) -> None:
    """One launch of one load: start it cold, measure `todo`, stop and record it. What a
    local run does for each load, and what a Ray worker does (scale/worker.py)."""
    engine = EngineLaunch.begin(context, arm, load, phase, model)
    try:
        engine.start()
        engine.check_log()
        probes = ProbeContext(engine)
        gated = False
        for cell in todo:
            if cell.phase != phase and not gated:  # a combined load's cost cells come last
                engine.cost_part()
                gated = True
            by_cell(cell.probe).measure(probes, cell)
            engine.check_log()
    except EngineError as exc:
        engine.failed(exc)
    except KeyboardInterrupt:
        engine.launch.error = INTERRUPTED
        raise
    except DiskFullError as exc:  # the engine is stopped below; the record says why
        engine.launch.error = f"servediff stopped: {exc}"
        raise
    finally:
        engine.close()


class SilentObserver:
    """An Observer that shows nothing (benchmarks, tests, library use)."""

    def run_starting(self, loads: int, cells: int) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def load_starting(self, arm: str, load: int, attempt: int, phase: Phase) -> None:
        pass

    def load_ready(self, arm: str, load: int, seconds: float, phase: Phase) -> None:
        pass

    def cell_starting(self, name: str, total: int) -> None:
        pass

    def cell_advanced(self, done: int) -> None:
        pass

    def cell_finished(self, name: str, seconds: float) -> None:
        pass

    def drift_finished(self, done: list[str], pending: list[str]) -> None:
        pass
