"""What a run's loads share: the plan, the corpus, the engine adapter, the bundle, the observer.

`RunContext` is what does not change between loads, with the injected
launcher and client factory (tests run the whole schedule against a fake
engine). It gates a load on a quiet machine, reads and writes load records,
and writes a finished cell. `ServedModel` is the model as the engine is
given it. `Observer` is what the measuring stage reports to; it never prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from servediff import atomic, quiet
from servediff.bundle import Layout, read_record, write_manifest
from servediff.corpus import Corpus
from servediff.engines.base import EngineAdapter
from servediff.engines.process import Launcher
from servediff.engines.transport import EngineClient, Watch
from servediff.evidence import Cell, Gate, LoadRecord, ModelSource, Phase, load_name
from servediff.plan import Plan


class Observer(Protocol):
    # the loads and cells this run still has to measure, before the first starts
    def run_starting(self, loads: int, cells: int) -> None: ...
    def note(self, message: str) -> None: ...
    def load_starting(self, arm: str, load: int, attempt: int, phase: Phase) -> None: ...
    def load_ready(self, arm: str, load: int, seconds: float, phase: Phase) -> None: ...
    def cell_starting(self, name: str, total: int) -> None: ...
    def cell_advanced(self, done: int) -> None: ...
    def cell_finished(self, name: str, seconds: float) -> None: ...
    # every drift load of the arms in `done` is measured; those of `pending` are not (yet):
    # called each time an arm's drift loads are all done, and once before the cost loads
    def drift_finished(self, done: list[str], pending: list[str]) -> None: ...


ClientFactory = Callable[[str, float, Watch | None], EngineClient]


def make_client(url: str, timeout_s: float, watch: Watch | None) -> EngineClient:
    return EngineClient(url, timeout_s, watch=watch)


@dataclass(frozen=True)
class ServedModel:
    """The model as this engine is given it, its weight hashes and the BOS id its files
    declare."""

    path: str
    weights_sha256: dict[str, str]
    bos_token_id: int | None
    source: ModelSource | None = None


@dataclass
class RunContext:
    """Everything of a run that stays the same from load to load."""

    plan: Plan
    corpus: Corpus
    adapter: EngineAdapter
    layout: Layout
    observer: Observer
    launcher: Launcher
    clients: ClientFactory = make_client
    # GPU memory in use before the run's first load (quiet.py), read at the first gate
    gpu_baseline: dict[int, int] | None = None
    # The Ray node the loads run on (None: a local run), named in every launch record
    node: str | None = None

    def gate(self, what: str, phase: Phase, engine_up: bool = False) -> Gate | None:
        """The quiet-box check before a load of this phase, when the plan asks for one
        (`engine_up`: before a combined load's cost part, its own engine running)."""
        spec = self.plan.quiet
        if self.plan.base_url is not None or not (
                spec.gate_cost if phase == "cost" else spec.gate_drift):
            return None
        if self.gpu_baseline is None:
            self.gpu_baseline = quiet.baseline()
        return quiet.gate(spec, self.gpu_baseline, what, self.observer.note, engine_up)

    def load_record(self, arm: str, load: int, phase: Phase) -> LoadRecord:
        path = self.layout.load(load_name(arm, load, phase))
        if path.exists():
            return read_record(path, LoadRecord)
        return LoadRecord(arm=arm, load=load, phase=phase)

    def write_load(self, record: LoadRecord) -> None:
        atomic.write_json(self.layout.load(record.name), record.model_dump(mode="json"))

    def finish(self, cell: Cell) -> None:
        """Write a finished cell; from now on it counts as measured."""
        atomic.write_json(self.layout.cell(cell.name), cell.model_dump(mode="json"))
        write_manifest(self.layout.root)
        self.observer.cell_finished(cell.name, cell.wall_seconds)
