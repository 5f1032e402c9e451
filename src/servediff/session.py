"""One load: an engine started cold, made ready, measured, stopped and recorded.

A `LoadSession` holds what every probe of a load needs: the engine process
and its HTTP client, the launch record, the arm's options, what the engine
reported about itself, and the corpus as token ids. It is the unit of work
the runner schedules (and the one a remote worker would run). `Room` is
what does not change between loads: the plan, the corpus, the engine
adapter, the bundle's layout, the observer, and the injected launcher and
client factory, so that tests can run the whole schedule against a fake.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import NoReturn, Protocol

from servediff import atomic, caches, quiet
from servediff.bundle import Layout, read_record, write_manifest
from servediff.conditions import gpu_models, read_conditions
from servediff.corpus import Corpus
from servediff.engines.activity import EngineActivity
from servediff.engines.base import EngineAdapter, EngineInfo, EngineOptions
from servediff.engines.process import EngineHandle, Launcher, engine_message, free_port
from servediff.engines.transport import EngineClient, Watch
from servediff.errors import BusyMachineError, EngineError, EngineRefusedError, EngineStartError
from servediff.evidence import Cell, Conditions, Gate, Launch, LoadRecord, Phase, Skipped, load_name
from servediff.plan import Plan, arm_options, cache_policy
from servediff.schedule import CellSpec

HOST = "127.0.0.1"


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
class Model:
    """The model as this engine serves it, its weight hashes and the BOS id its files
    declare."""

    path: str
    weights_sha256: dict[str, str]
    bos_token_id: int | None


@dataclass
class Room:
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

    def gate(self, what: str, phase: Phase) -> Gate | None:
        """The quiet-box check before a load of this phase, when the plan asks for one."""
        spec = self.plan.quiet
        if self.plan.base_url is not None or not (
                spec.gate_cost if phase == "cost" else spec.gate_drift):
            return None
        if self.gpu_baseline is None:
            self.gpu_baseline = quiet.baseline()
        return quiet.gate(spec, self.gpu_baseline, what, self.observer.note)

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


@dataclass
class LoadSession:
    room: Room
    arm: str
    load: int
    phase: Phase
    model: Model
    record: LoadRecord = field(init=False)
    options: EngineOptions = field(init=False)
    launch: Launch = field(init=False)
    url: str = field(init=False)
    proc: EngineHandle | None = None
    client: EngineClient | None = None
    info: EngineInfo | None = None
    bos_token_id: int | None = None
    # Where this launch's part of the load's engine log starts (bytes).
    log_offset: int = 0

    def __post_init__(self) -> None:
        plan, adapter = self.room.plan, self.room.adapter
        self.record = self.room.load_record(self.arm, self.load, self.phase)
        options = arm_options(plan, self.arm)
        # Cost loads measure the engine as the arm configures it (no cache isolation).
        self.options = adapter.as_configured(options) if self.phase == "cost" else options

    @property
    def name(self) -> str:
        return load_name(self.arm, self.load, self.phase)

    @property
    def plan(self) -> Plan:
        return self.room.plan

    @property
    def adapter(self) -> EngineAdapter:
        return self.room.adapter

    # --- start and stop ---------------------------------------------------------------

    def start(self) -> None:
        """Start the engine cold (nothing for an external endpoint) and wait until ready;
        the launch record is written before and after."""
        plan, room = self.plan, self.room
        try:
            gate = room.gate(f"{self.phase} load {self.load} of `{self.arm}`", self.phase)
        except BusyMachineError as exc:
            if isinstance(exc.gate, Gate):  # the refusal is evidence: the report names it
                self.record.refused = exc.gate
                room.write_load(self.record)
                write_manifest(room.layout.root)
            raise
        room.observer.load_starting(self.arm, self.load, len(self.record.launches) + 1,
                                    self.phase)
        t0 = time.monotonic()
        attempt = len(self.record.launches) + 1
        options = self.options.model_dump(mode="json")
        self.launch = Launch(attempt=attempt, options=options, host=HOST,
                             started_at=time.time(), command=[], env_diff={}, port=0, pid=0,
                             external=plan.base_url is not None,
                             weights_sha256=self.model.weights_sha256, gate=gate,
                             machine=socket.gethostname(), gpu_models=gpu_models(),
                             node=room.node)
        self.record.launches.append(self.launch)
        if plan.base_url is not None:
            self.url = plan.base_url.rstrip("/")
        else:
            port = free_port(HOST)
            spec = self.adapter.launch(plan.launch.command, self.model.path, HOST, port,
                                       plan.arms[self.arm].args, self.options)
            env = {**spec.env, **plan.launch.env, **plan.arms[self.arm].env}
            # Cold means cold: the engine's JIT and autotune caches as the policy says.
            policy = cache_policy(plan, self.arm)
            cache_env, self.launch.caches = caches.prepare(
                policy, self.adapter.caches, room.layout.root, self.arm, self.name,
                {**os.environ, **env})
            env = {**env, **cache_env}
            self.launch.cuda_visible_devices = env.get(
                "CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
            self.launch.cache_policy = policy
            self.url = f"http://{HOST}:{port}"
            self.launch.command, self.launch.env_diff, self.launch.port = spec.argv, env, port
            self.launch.notes = spec.notes
            log = room.layout.log(self.name)
            # the log is appended to by every launch of the load: this one's part starts here
            self.log_offset = log.stat().st_size if log.exists() else 0
            try:
                self.proc = room.launcher(spec.argv, env, room.layout.log(self.name), HOST,
                                          port)
            except OSError as exc:
                raise EngineStartError(f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}"
                                       ) from None
            # started in a new session: the engine's process group is led by its pid
            self.launch.pid = self.launch.pgid = self.proc.pid
            self.launch.started_at = self.proc.started_at
        room.write_load(self.record)
        scoring = plan.scoring
        self.client = self.client_for(scoring.request_timeout_s, scoring.give_up_s)
        self._wait_ready(t0)
        room.write_load(self.record)
        room.observer.load_ready(self.arm, self.load, self.launch.seconds_to_ready or 0.0,
                                 self.phase)

    def client_for(self, timeout_s: float, give_up_s: float | None) -> EngineClient:
        """A client whose requests past `timeout_s` wait on the engine only while it works."""
        watch = None if self.proc is None else Watch(
            EngineActivity(self.proc.pid), self.plan.launch.stall_window_s,
            give_up_s or 10 * timeout_s)
        return self.room.clients(self.url, timeout_s, watch)

    def _wait_ready(self, t0: float) -> None:
        """Ready = health answers, version read, and one real scoring request completed."""
        assert self.client is not None
        client, adapter, launch = self.client, self.adapter, self.launch
        deadline = time.monotonic() + self.plan.launch.start_timeout_s
        while not client.healthy(adapter.health_path()):
            if self.proc is not None and not self.proc.alive():
                self._exited_at_start()
            if time.monotonic() > deadline:
                raise EngineStartError(
                    f"engine not healthy after {self.plan.launch.start_timeout_s:.0f} s")
            time.sleep(0.1)
        info = adapter.info(client)
        probe = adapter.tokenize(client, "Ready check: one real request.", self.options)
        launch.cache_isolation = adapter.cache_isolation(self.options)
        launch.prefix_cache = adapter.prefix_cache(self.options)
        if "generate" in adapter.capabilities:
            # The first request after a start must find nothing cached.
            first = adapter.generate(client, probe, 1, self.options)
            launch.first_request_cached_tokens = first.cached_tokens
        adapter.score(client, [probe], self.options)
        launch.seconds_to_ready = round(time.monotonic() - t0, 3)
        self.info = info
        self.bos_token_id = info.bos_token_id
        launch.engine = {**info.raw, "version": info.version, "bos_token_id": info.bos_token_id,
                         "max_model_len": info.max_model_len}
        if info.bos_token_id is None and self.model.bos_token_id is not None:
            self.bos_token_id = self.model.bos_token_id
            launch.engine.update(bos_token_id=self.bos_token_id,
                                 bos_token_id_from="model files")
        launch.capacity = dict(info.capacity)

    def _exited_at_start(self) -> NoReturn:
        """The engine ended before it was ready. An exit code of its own (not a signal) with
        its own message is a refusal: the configuration does not exist on this stack."""
        assert self.proc is not None
        rc = self.proc.returncode
        if rc is not None and rc > 0:
            self.launch.engine_refusal = engine_message(self.own_log())
            raise EngineRefusedError(f"engine exited with code {rc} before it was ready: "
                                     f"{self.launch.engine_refusal}")
        raise EngineStartError(f"engine exited with code {rc} before it was ready")

    def own_log(self) -> str:
        """This launch's part of the load's engine log."""
        path = self.room.layout.log(self.name)
        if not path.exists():
            return ""
        with path.open("rb") as fh:
            fh.seek(self.log_offset)
            return fh.read().decode("utf-8", "replace")

    def check_log(self) -> None:
        """Fail the load when the engine's log shows it cannot be trusted (adapter.py's
        fault_in_log: SGLang calling its sgl_kernel stand-in)."""
        if self.proc is None:
            return
        fault = self.adapter.fault_in_log(self.own_log())
        if fault is not None:
            raise EngineError(fault)

    def failed(self, exc: EngineError) -> None:
        """The launch ended in an engine error: recorded, and a dying engine is given a
        moment to be reaped so that its death is recorded as such."""
        self.launch.error = str(exc)
        self.room.observer.note(f"{self.arm} {self.phase} load {self.load}: {exc}")
        if self.proc is not None:
            self.proc.exited_within(2.0)

    def close(self) -> None:
        """Stop the engine for sure and record the stop; the load record is written even
        when the launch never got as far as a client."""
        if not hasattr(self, "launch"):
            return  # refused before anything started (the quiet-box gate)
        if self.client is not None:
            self.client.close()
        if self.proc is not None:
            self.launch.stop = self.proc.stop(self.plan.launch.stop_grace_s)
            self.launch.caches = caches.settle(self.launch.caches)
            path = self.room.layout.log(self.name)
            log = path.read_text(errors="replace") if path.exists() else ""
            self.launch.capacity = {**self.adapter.capacity_from_log(log),
                                    **self.launch.capacity}
            self.launch.startup = self.adapter.startup_from_log(log)
        self.launch.finished_at = time.time()
        self.room.write_load(self.record)
        write_manifest(self.room.layout.root)

    # --- what probes use ----------------------------------------------------------------

    @property
    def engine(self) -> EngineClient:
        assert self.client is not None, "the session has not started"
        return self.client

    @property
    def context_length(self) -> int | None:
        return self.info.max_model_len if self.info else None

    @property
    def prompt_limit(self) -> int | None:
        """The longest prompt the engine says it accepts, where it says (SGLang)."""
        value = self.info.capacity.get("max_prompt_tokens") if self.info else None
        return int(value) if value else None

    @cached_property
    def head(self) -> tuple[list[int], str]:
        """The token put in front of every text, and its label in the records."""
        prefix = self.plan.scoring.prefix
        if prefix == "none":
            return [], "none"
        if prefix == "bos":
            if self.bos_token_id is None:
                raise EngineStartError(
                    "scoring.prefix = \"bos\" but neither the engine nor the model files "
                    "declare a BOS token; set scoring.prefix to \"none\" or a token id")
            return [self.bos_token_id], f"bos:{self.bos_token_id}"
        return [int(prefix)], f"id:{prefix}"

    @cached_property
    def ids(self) -> dict[str, list[int]]:
        """Every corpus text as the ids that are scored: the head, then the text's tokens."""
        head, _ = self.head
        return {t.tag: head + self.adapter.tokenize(self.engine, t.text, self.options)
                for t in self.room.corpus.texts}

    @cached_property
    def stream(self) -> list[int]:
        """The corpus as one token stream: what cost-probe prompts are cut from."""
        return self.adapter.tokenize(
            self.engine, "\n\n".join(t.text for t in self.room.corpus.texts), self.options)

    def fits(self, lengths: list[int], extra: int) -> tuple[list[int], list[Skipped]]:
        """The prompt lengths that leave room for `extra` generated tokens in the context
        the engine reports, and a skip record for each that does not."""
        context = self.context_length
        if context is None:
            return list(lengths), []
        fitting = [n for n in lengths if n + extra <= context]
        return fitting, [Skipped(length=n, reason=f"prompt + {extra} generated tokens exceed "
                                 f"the context of {context}")
                         for n in lengths if n + extra > context]

    def conditions(self) -> Conditions:
        """The box now, and where this launch's engine runs."""
        return read_conditions(self.launch.pgid, self.launch.node,
                               self.launch.cuda_visible_devices)

    def cell(self, spec: CellSpec, order: list[str] | None = None) -> Cell:
        """A new cell of this launch, its conditions read now; its clock starts now."""
        return Cell(arm=spec.arm, load=spec.load, phase=spec.phase, probe=spec.probe,
                    repeat=spec.repeat, launch=self.launch.attempt, order=order or [],
                    started_at=time.time(), wall_seconds=0.0, engine_seconds=0.0,
                    conditions=self.conditions(), records=[],
                    context_length=self.context_length)

    def finish(self, cell: Cell, engine_seconds: float | None = None) -> None:
        """Close a cell's clock and write it."""
        cell.conditions_after = self.conditions()
        cell.wall_seconds = round(time.time() - cell.started_at, 6)
        cell.engine_seconds = round(cell.wall_seconds if engine_seconds is None
                                    else engine_seconds, 6)
        self.room.finish(cell)
