"""What a Ray worker runs: one load, measured by the same code as a local load.

The worker measures into a scratch run directory on its node (one per run and
node: a shared JIT cache of an arm stays on the node with it), seeded with
what the bundle already holds of the load (its load record, log and sweep
progress), so that launch numbering and resume work as locally. It returns
the load's files as bytes; the driver alone writes the bundle. After a
worker was lost, `reap` runs on the same node: it stops what is left of the
load's engine, records the stop, and returns whatever the load had written.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from servediff import atomic
from servediff.bundle import Layout, read_record
from servediff.context import RunContext, ServedModel
from servediff.corpus import Corpus
from servediff.engines import registry
from servediff.engines.process import EngineProcess, stop_stale
from servediff.evidence import LoadRecord, Phase, load_name
from servediff.plan import Plan
from servediff.runner import SilentObserver, measure_load, resolve_model
from servediff.schedule import CellSpec


@dataclass(frozen=True)
class LoadJob:
    """One load for a worker: what to measure and what the bundle holds of it so far."""

    plan: Plan
    corpus: Corpus
    arm: str
    load: int
    phase: Phase
    todo: list[CellSpec]
    base_dir: str
    run_id: str
    # bundle-relative path -> content: the load record, log and partial files so far
    seeds: dict[str, bytes]

    @property
    def name(self) -> str:
        return load_name(self.arm, self.load, self.phase)


@dataclass
class LoadResult:
    """The load's files after the worker (bundle-relative path -> content), where it ran,
    and what it would have shown on a terminal."""

    files: dict[str, bytes]
    node: str
    notes: list[str] = field(default_factory=list)
    cells: list[tuple[str, float]] = field(default_factory=list)


class Recorder(SilentObserver):
    """The worker's Observer: notes and finished cells, sent back with the result."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.cells: list[tuple[str, float]] = []

    def note(self, message: str) -> None:
        self.notes.append(message)

    def cell_finished(self, name: str, seconds: float) -> None:
        self.cells.append((name, seconds))


def scratch_root(run_id: str) -> Path:
    """The run's scratch run directory on this node."""
    return Path(tempfile.gettempdir()) / "servediff-scratch" / run_id


def load_files(root: Path, name: str, cells: list[CellSpec]) -> list[Path]:
    """Every file under `root` of load `name` measuring `cells`: its record, log, cells and
    partial files."""
    layout = Layout(root)
    paths = [layout.load(name), layout.log(name)]
    for cell in cells:
        paths.append(layout.cell(cell.name))
        paths += layout.partials(cell.name)
    return [p for p in paths if p.is_file()]


def collect(root: Path, name: str, cells: list[CellSpec]) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in load_files(root, name, cells)}


_MODELS: dict[tuple[str, str | None, str, str], ServedModel] = {}


def _model(plan: Plan, base_dir: str) -> ServedModel:
    """The model as this node serves it; a worker process measures many loads, so the
    weights are hashed once per process."""
    adapter = registry.create(plan.engine)
    key = (plan.model, plan.base_url, adapter.model_format, base_dir)
    if key not in _MODELS:
        _MODELS[key] = resolve_model(plan, adapter, Path(base_dir), lambda _: None)
    return _MODELS[key]


def node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


def run_load(job: LoadJob) -> LoadResult:
    """Measure one load on this node and return its files."""
    root = scratch_root(job.run_id)
    # the bundle is the truth: what it lacks of the load goes here too
    for path in load_files(root, job.name, job.todo):
        path.unlink()
    for ref, data in job.seeds.items():
        (root / ref).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(root / ref, data)
    recorder = Recorder()
    node = node_id()
    context = RunContext(plan=job.plan, corpus=job.corpus, adapter=registry.create(job.plan.engine),
                layout=Layout(root), observer=recorder, launcher=EngineProcess, node=node)
    context.layout.logs.mkdir(parents=True, exist_ok=True)
    measure_load(context, job.arm, job.load, job.phase, job.todo, _model(job.plan, job.base_dir))
    return LoadResult(files=collect(root, job.name, job.todo), node=node, notes=recorder.notes,
                      cells=recorder.cells)


def reap(job: LoadJob, why: str) -> LoadResult:
    """After the worker that ran `job` was lost: stop what is left of its engine on this
    node, record the stop and why the launch ended, and return the load's files."""
    root = scratch_root(job.run_id)
    layout = Layout(root)
    notes = []
    path = layout.load(job.name)
    if path.exists():
        record = read_record(path, LoadRecord)
        for launch in record.launches:
            if launch.stop is None and not launch.external and launch.pid:
                launch.stop = stop_stale(launch.pgid or launch.pid, launch.started_at,
                                         launch.host, launch.port, layout.log(job.name),
                                         job.plan.launch.stop_grace_s)
                launch.error = launch.error or why
                launch.finished_at = launch.finished_at or time.time()
                notes.append(f"{job.name} launch {launch.attempt}: {why}; " + (
                    "its engine was still running and is now stopped"
                    if launch.stop.found_alive else "its engine had already ended"))
        atomic.write_json(path, record.model_dump(mode="json"))
    return LoadResult(files=collect(root, job.name, job.todo), node=node_id(), notes=notes)
