"""One launch of a load's engine: gated, started cold, made ready, stopped and recorded.

`EngineLaunch.begin` checks the machine (the quiet-box gate), appends a new
launch to the load record and returns the launch; `start` merges the
environment's four layers (the adapter's, the plan's, the arm's, the cache
policy's; a cache the plan keeps, `launch.keep_caches`, is left as given), starts the
engine in its own process group and waits until it answers a real request;
`close` stops it for sure and writes the record. An external endpoint is
neither started nor stopped. Probes see the engine only
through a `ProbeContext` (probes/context.py).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from servediff import caches, room, secret_env
from servediff.bundle import write_manifest
from servediff.conditions import read_conditions
from servediff.context import RunContext, ServedModel
from servediff.engines.activity import EngineActivity
from servediff.engines.base import EngineAdapter, EngineInfo, EngineOptions
from servediff.engines.process import EngineHandle, engine_message, free_port
from servediff.engines.transport import EngineClient, Watch
from servediff.errors import BusyMachineError, EngineError, EngineRefusedError, EngineStartError
from servediff.evidence import (
    Conditions,
    Gate,
    Launch,
    LoadRecord,
    ModelSource,
    Phase,
    load_name,
)
from servediff.plan import Plan, arm_options, cache_policy, launch_command

HOST = "127.0.0.1"


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held until the block ends, then raised as KeyboardInterrupt: a
    stop cut short would leave the launch unrecorded and out of the manifest (seen on the
    H200: SGLang takes seconds to stop, and a time budget's SIGINT landed in between).
    Signals can be caught in the main thread only; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    before = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if held:
        raise KeyboardInterrupt


def carried_wheels(pythonpath: str) -> dict[str, Any] | None:
    """What `scripts/gpu_carry.py install` wrote into a folder of the engine's PYTHONPATH:
    the wheel set the engine runs from."""
    for folder in filter(None, pythonpath.split(os.pathsep)):
        record = Path(folder) / "servediff-carry.json"
        if record.is_file():
            try:
                data = json.loads(record.read_text())
            except (OSError, ValueError):
                return {"unreadable": str(record)}
            return data if isinstance(data, dict) else {"unreadable": str(record)}
    return None


def hub_args(source: ModelSource | None, flag: str | None) -> list[str]:
    """The engine's arguments for a hub id that the local cache did not hold: its revision
    (a cached one is given as its snapshot's folder, which pins it)."""
    if source is None or source.kind != "hub" or source.hub_commit is not None:
        return []
    return [flag, source.hub_revision] if flag and source.hub_revision else []


@dataclass
class EngineLaunch:
    """A launch of one load (arm, load number, phase): its record, the arm's options as this
    phase uses them, and, once started, the process, its client and what it reported."""

    context: RunContext
    arm: str
    load: int
    phase: Phase
    model: ServedModel
    record: LoadRecord
    options: EngineOptions
    launch: Launch
    # when `begin` was called: seconds to ready count from here
    began: float
    url: str = ""
    proc: EngineHandle | None = None
    client: EngineClient | None = None
    info: EngineInfo | None = None
    # the BOS id the engine reports, else the one the model files declare
    bos_token_id: int | None = None
    # where this launch's part of the load's engine log starts (bytes)
    log_offset: int = 0
    # secret values -> the reference a stored log says instead (secret_env.py)
    hidden: dict[str, str] = field(default_factory=dict)

    @classmethod
    def begin(cls, context: RunContext, arm: str, load: int, phase: Phase,
              model: ServedModel) -> EngineLaunch:
        """The next launch of this load, recorded; the gate's refusal (BusyMachineError)
        is recorded in the load record and raised before anything starts."""
        plan = context.plan
        record = context.load_record(arm, load, phase)
        record.combined = phase == "drift" and plan.combined(arm, load)
        try:
            gate = context.gate(f"{phase} load {load} of `{arm}`", phase)
        except BusyMachineError as exc:
            if isinstance(exc.gate, Gate):  # the refusal is evidence: the report names it
                record.refused = exc.gate
                context.write_load(record)
                write_manifest(context.layout.root)
            raise
        attempt = len(record.launches) + 1
        context.observer.load_starting(arm, load, attempt, phase)
        options = arm_options(plan, arm)
        # Cost loads measure the engine as the arm configures it (no cache isolation).
        if phase == "cost":
            options = context.adapter.as_configured(options)
        here = room.here()
        launch = Launch(attempt=attempt, options=options.model_dump(mode="json"), host=HOST,
                        started_at=time.time(), command=[], env_diff={}, port=0, pid=0,
                        external=plan.base_url is not None,
                        weights_sha256=model.weights_sha256, model_source=model.source,
                        gate=gate,
                        machine=here.host, gpu_models=list(here.gpu_models),
                        room_id=here.fingerprint, boot_id=room.boot(),
                        node=context.node)
        record.launches.append(launch)
        return cls(context=context, arm=arm, load=load, phase=phase, model=model,
                   record=record, options=options, launch=launch, began=time.monotonic())

    @property
    def name(self) -> str:
        return load_name(self.arm, self.load, self.phase)

    def cost_part(self) -> None:
        """Before a combined load's first cost cell: the quiet-box gate a cost load gets,
        with this load's engine up, recorded in the launch. Its refusal ends the launch
        (the drift cells stay measured) and is raised as BusyMachineError."""
        what = f"the cost part of drift load {self.load} of `{self.arm}`"
        try:
            self.launch.cost_gate = self.context.gate(what, "cost", engine_up=True)
        except BusyMachineError as exc:
            if isinstance(exc.gate, Gate):
                self.launch.cost_gate = exc.gate
            self.launch.error = f"servediff stopped before the cost part: {exc}"
            raise

    @property
    def plan(self) -> Plan:
        return self.context.plan

    @property
    def adapter(self) -> EngineAdapter:
        return self.context.adapter

    def start(self) -> None:
        """Start the engine cold (nothing for an external endpoint) and wait until ready;
        the load record is written before and after."""
        plan, context, launch = self.plan, self.context, self.launch
        if plan.base_url is not None:
            self.url = plan.base_url.rstrip("/")
        else:
            port = free_port(HOST)
            args = [*hub_args(self.model.source, self.adapter.hub_revision_flag),
                    *plan.arms[self.arm].args]
            spec = self.adapter.launch(launch_command(plan, self.arm), self.model.path, HOST, port,
                                       args, self.options)
            env = {**spec.env, **plan.launch.env, **plan.arms[self.arm].env}
            # Cold means cold: the engine's JIT and autotune caches as the policy says.
            policy = cache_policy(plan, self.arm)
            cache_env, launch.caches = caches.prepare(
                policy, self.adapter.caches, context.layout.root, self.arm, self.name,
                {**os.environ, **env},
                given=frozenset(plan.launch.keep_caches))
            env = {**env, **cache_env}
            launch.wheel_set = carried_wheels(env.get("PYTHONPATH", ""))
            launch.cuda_visible_devices = env.get(
                "CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
            launch.cache_policy = policy
            self.url = f"http://{HOST}:{port}"
            # the record keeps env references ("${HF_TOKEN}"); the engine gets their values
            launch.command, launch.env_diff, launch.port = spec.argv, env, port
            self.hidden = secret_env.hidden(env)
            launch.notes = spec.notes
            log = context.layout.log(self.name)
            # the log is appended to by every launch of the load: this one's part starts here
            self.log_offset = log.stat().st_size if log.exists() else 0
            try:
                self.proc = context.launcher(spec.argv, secret_env.expand(env), log, HOST,
                                             port)
            except OSError as exc:
                raise EngineStartError(f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}"
                                       ) from None
            # started in a new session: the engine's process group is led by its pid
            launch.pid = launch.pgid = self.proc.pid
            launch.started_at = self.proc.started_at
        context.write_load(self.record)
        scoring = plan.scoring
        self.client = self.client_for(scoring.request_timeout_s, scoring.give_up_s)
        self._wait_ready(self.client)
        context.write_load(self.record)
        context.observer.load_ready(self.arm, self.load, launch.seconds_to_ready or 0.0,
                                    self.phase)

    def client_for(self, timeout_s: float, give_up_s: float | None) -> EngineClient:
        """A client whose requests past `timeout_s` wait on the engine only while it works."""
        watch = None if self.proc is None else Watch(
            EngineActivity(self.proc.pid), self.plan.launch.stall_window_s,
            give_up_s or 10 * timeout_s)
        return self.context.clients(self.url, timeout_s, watch)

    def _wait_ready(self, client: EngineClient) -> None:
        """Ready = health answers, version read, and one real scoring request completed."""
        adapter, launch = self.adapter, self.launch
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
        launch.seconds_to_ready = round(time.monotonic() - self.began, 3)
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
        its own message is a refusal (or what the adapter knows as its engine's own way of
        giving up): the configuration does not exist on this stack."""
        assert self.proc is not None
        rc = self.proc.returncode
        log = self.own_log()
        if rc is not None and self.adapter.refused_itself(rc, log):
            self.launch.engine_refusal = engine_message(log)
            raise EngineRefusedError(f"engine exited with code {rc} before it was ready: "
                                     f"{self.launch.engine_refusal}")
        raise EngineStartError(f"engine exited with code {rc} before it was ready")

    def own_log(self) -> str:
        """This launch's part of the load's engine log."""
        path = self.context.layout.log(self.name)
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

    def conditions(self) -> Conditions:
        """The box now, and where this launch's engine runs."""
        return read_conditions(self.launch.pgid, self.launch.node,
                               self.launch.cuda_visible_devices)

    def failed(self, exc: EngineError) -> None:
        """The launch ended in an engine error: recorded, and a dying engine is given a
        moment to be reaped so that its death is recorded as such."""
        self.launch.error = str(exc)
        kind = "combined" if self.record.combined else self.phase
        self.context.observer.note(f"{self.arm} {kind} load {self.load}: {exc}")
        if self.proc is not None:
            self.proc.exited_within(2.0)

    def close(self) -> None:
        """Stop the engine for sure and record the stop; the load record is written even
        when the launch never got as far as a client, and an interrupt that comes while
        the engine stops (Ctrl-C, a budget's SIGINT) waits until the record is on disk."""
        with interrupts_deferred():
            self._close()

    def _close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.proc is not None:
            self.launch.stop = self.proc.stop(self.plan.launch.stop_grace_s)
            self.launch.caches = caches.settle(self.launch.caches)
            path = self.context.layout.log(self.name)
            # the stored log, and what the record quotes of it, without secret values
            secret_env.redact_file(path, self.hidden)
            self.launch.stop.log_tail = secret_env.redact(self.launch.stop.log_tail,
                                                          self.hidden)
            for part in ("error", "engine_refusal"):
                if (said := getattr(self.launch, part)) is not None:
                    setattr(self.launch, part, secret_env.redact(said, self.hidden))
            log = path.read_text(errors="replace") if path.exists() else ""
            self.launch.capacity = {**self.adapter.capacity_from_log(log),
                                    **self.launch.capacity}
            self.launch.startup = self.adapter.startup_from_log(log)
        self.launch.finished_at = time.time()
        self.context.write_load(self.record)
        write_manifest(self.context.layout.root)
