"""The measuring stage: walk the locked plan's schedule, one cold load at a time.

The runner locks the plan, works out which cells are still missing (so an
interrupted run resumes without redoing finished cells), resolves the model
once, and runs each load that has work left as a `LoadSession`: start cold,
hand each missing cell to its probe, stop and record. An engine that fails
to start or dies mid-load is recorded in the load record; the load is
started again for the cells it left, and the run goes on. The launcher and
the client factory are injected, so the whole schedule runs against a fake
in tests. The runner never prints: it reports to an `Observer`.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

from servediff import models
from servediff.bundle import Layout, exclusive, read_record, write_lock, write_manifest
from servediff.conditions import gpu_models
from servediff.corpus import Corpus
from servediff.engines import registry
from servediff.engines.base import EngineAdapter
from servediff.engines.process import EngineProcess, Launcher, stop_stale
from servediff.errors import BundleError, EngineError, OutputDirError
from servediff.evidence import Cell, LoadRecord, Phase, load_name
from servediff.plan import Plan, lock
from servediff.probes import by_cell, cells_of_load
from servediff.schedule import CellSpec, schedule
from servediff.session import ClientFactory, LoadSession, Model, Observer, Room, make_client


def ensure_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".servediff-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputDirError(f"{root}: output folder is not writable ({exc.strerror})") from None


def resolve_model(plan: Plan, adapter: EngineAdapter, base_dir: Path,
                  say: Callable[[str], None]) -> Model:
    """The model path as this engine serves it, its weight hashes and declared BOS id."""
    if plan.base_url is not None:
        return Model(plan.model, {}, None)
    if plan.model == "smollm2":
        path, hashes = (models.smollm2_gguf(say) if adapter.model_format == "gguf"
                        else models.smollm2_dir(say))
    else:
        path = (base_dir / plan.model).expanduser().resolve()
        hashes = models.weight_hashes(path)
    return Model(str(path), hashes, models.bos_token_id(path))


class Runner:
    def __init__(self, plan: Plan, corpus: Corpus, root: Path, base_dir: Path,
                 observer: Observer, launcher: Launcher = EngineProcess,
                 clients: ClientFactory = make_client) -> None:
        self.room = Room(plan=plan, corpus=corpus, adapter=registry.create(plan.engine),
                         layout=Layout(root), observer=observer, launcher=launcher,
                         clients=clients)
        self.base_dir = base_dir

    @property
    def layout(self) -> Layout:
        return self.room.layout

    def run(self) -> None:
        ensure_writable(self.layout.root)
        with exclusive(self.layout.root):
            self._run()

    def reap(self) -> None:
        """Launches that a servediff killed before it could stop them: what is left of
        their engines is stopped now, and the stop is recorded as one at resume."""
        room = self.room
        for path in sorted((self.layout.root / "loads").glob("*.json")):
            record = read_record(path, LoadRecord)
            stale = [x for x in record.launches if x.stop is None and not x.external and x.pid]
            for launch in stale:
                launch.stop = stop_stale(launch.pgid or launch.pid, launch.started_at,
                                         launch.host, launch.port,
                                         self.layout.log(record.name),
                                         room.plan.launch.stop_grace_s)
                launch.error = launch.error or "servediff ended before it stopped this launch"
                launch.finished_at = launch.finished_at or time.time()
                room.observer.note(
                    f"{record.name} launch {launch.attempt} had no stop record: "
                    + ("its engine was still running and is now stopped" if
                       launch.stop.found_alive else "its engine had already ended"))
            if stale:
                room.write_load(record)
        write_manifest(self.layout.root)

    def one_room(self) -> None:
        """Every comparison is measured in one room: a run started on another machine (or
        another GPU model) is not continued here unless the plan says cross_machine."""
        here = (socket.gethostname(), tuple(gpu_models()))
        seen = {(x.machine, tuple(x.gpu_models))
                for path in sorted((self.layout.root / "loads").glob("*.json"))
                for x in read_record(path, LoadRecord).launches if x.machine is not None}
        if seen and here not in seen and not self.room.plan.cross_machine:
            there = ", ".join(f"{m} ({', '.join(g) or 'no GPU'})" for m, g in sorted(seen))
            raise BundleError(
                f"{self.layout.root}: its loads were measured on {there}; this machine is "
                f"{here[0]} ({', '.join(here[1]) or 'no GPU'}). A comparison is measured in "
                "one room: resume it there, or set cross_machine = true in the plan (both "
                "machines are then named in the report)")

    def _run(self) -> None:
        room = self.room
        self.reap()
        write_lock(self.layout.root, lock(room.plan, room.corpus))
        self.one_room()
        pending = [(arm, load, phase, todo) for arm, load, phase in schedule(room.plan)
                   if (todo := self.missing(cells_of_load(room.plan, arm, load, phase)))]
        if not pending:
            room.observer.note("every cell of this plan is already measured; nothing to run")
            return
        room.observer.run_starting(len(pending), sum(len(todo) for *_, todo in pending))
        model = resolve_model(room.plan, room.adapter, self.base_dir, room.observer.note)
        # Each arm's drift answer is shown as soon as its drift loads are done, and the
        # whole drift answer before the cost loads: the cost loads take longer.
        announced = self.drift_done()
        drift_open = pending[0][2] == "drift"
        refused = self.refused()
        for arm, load, phase, todo in pending:
            if arm in refused:
                # its configuration does not exist on this stack: no other load of it starts
                room.observer.note(f"{load_name(arm, load, phase)} not started: `{arm}` "
                                   f"did not start ({refused[arm]})")
                continue
            if drift_open and phase == "cost":
                if announced != set(room.plan.arms):  # some arm's drift loads failed
                    self.announce(self.drift_done())
                drift_open = False
            # A load whose engine failed or died is started again (a new launch of the
            # same load) for the cells it left. A launch that measured something (a
            # sweep point that killed the engine is a measurement) does not count
            # against max_attempts; max_attempts launches in a row without progress end it.
            barren = 0
            while todo and barren < room.plan.launch.max_attempts:
                before = self.progress(todo)
                self.run_load(arm, load, phase, todo, model)
                barren = 0 if self.progress(todo) > before else barren + 1
                todo = self.missing(todo)
            if todo and (message := self.refusal(arm, load, phase)):
                refused[arm] = message
            if phase == "drift" and (done := self.drift_done()) - announced:
                self.announce(done)
                announced = done

    def refusal(self, arm: str, load: int, phase: Phase) -> str | None:
        """The engine's message when it refused every launch of this load."""
        path = self.layout.load(load_name(arm, load, phase))
        if not path.exists():
            return None
        return read_record(path, LoadRecord).did_not_start(self.room.plan.launch.max_attempts)

    def refused(self) -> dict[str, str]:
        """The arms that did not start (refusal above), with the engine's message."""
        out: dict[str, str] = {}
        for path in sorted((self.layout.root / "loads").glob("*.json")):
            record = read_record(path, LoadRecord)
            message = record.did_not_start(self.room.plan.launch.max_attempts)
            if record.arm not in out and message:
                out[record.arm] = message
        return out

    def drift_done(self) -> set[str]:
        """The arms whose drift cells are all measured."""
        plan = self.room.plan
        return {arm for arm in plan.arms
                if not any(self.missing(cells_of_load(plan, arm, load))
                           for load in range(1, plan.loads_per_arm + 1))}

    def announce(self, done: set[str]) -> None:
        arms = list(self.room.plan.arms)
        self.room.observer.drift_finished([a for a in arms if a in done],
                                          [a for a in arms if a not in done])

    def missing(self, cells: list[CellSpec]) -> list[CellSpec]:
        return [c for c in cells if not self.layout.cell(c.name).exists()]

    def progress(self, cells: list[CellSpec]) -> int:
        """Finished cells and recorded sweep points among `cells`."""
        done = sum(self.layout.cell(c.name).exists() for c in cells)
        kept = [read_record(path, Cell) for c in cells
                if (path := self.layout.progress(c.name)).exists()]
        return done + sum(len(k.sweep) for k in kept)

    def run_load(self, arm: str, load: int, phase: Phase, todo: list[CellSpec],
                 model: Model) -> None:
        measure_load(self.room, arm, load, phase, todo, model)


def measure_load(room: Room, arm: str, load: int, phase: Phase, todo: list[CellSpec],
                 model: Model) -> None:
    """One launch of one load: start it cold, measure `todo`, stop and record it. What a
    local run does for each load, and what a Ray worker does (scale/worker.py)."""
    session = LoadSession(room, arm, load, phase, model)
    try:
        session.start()
        session.check_log()
        for cell in todo:
            by_cell(cell.probe).measure(session, cell)
            session.check_log()
    except EngineError as exc:
        session.failed(exc)
    except KeyboardInterrupt:
        if hasattr(session, "launch"):
            session.launch.error = "interrupted: servediff was stopped (SIGINT or SIGTERM)"
        raise
    finally:
        session.close()


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
