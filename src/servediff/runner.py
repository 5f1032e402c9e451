"""The measuring stage: start each load cold, run its cells, write raw evidence.

The runner walks the locked plan's schedule (arms counterbalanced: A B, then
B A, ...), starts one engine process per load, runs that load's cells and
stops it. A cell is written atomically when it completes, so a run
interrupted anywhere resumes without redoing finished cells. An engine that
fails to start or dies mid-load is recorded in the load record; the run
goes on with the next load. The runner never prints: it reports to an
`Observer`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from servediff import atomic, models
from servediff.bundle import Layout, read_versioned, write_lock, write_manifest
from servediff.conditions import read_conditions
from servediff.corpus import Corpus
from servediff.engines import registry
from servediff.engines.activity import EngineActivity
from servediff.engines.base import EngineAdapter, EngineOptions, Scored
from servediff.engines.process import EngineProcess, free_port, tail
from servediff.engines.transport import EngineClient, Watch
from servediff.errors import EngineError, EngineStartError, OutputDirError
from servediff.evidence import (
    SCHEMA_VERSION,
    Cell,
    Conditions,
    Group,
    Launch,
    LoadRecord,
    Phase,
    Record,
    Skipped,
    Stop,
    cell_name,
    load_name,
)
from servediff.plan import Plan, arm_options, lock
from servediff.probes import concurrency, generate, prefix, speed, sweep

HOST = "127.0.0.1"


class Observer(Protocol):
    def note(self, message: str) -> None: ...
    def load_starting(self, arm: str, load: int, attempt: int) -> None: ...
    def load_ready(self, arm: str, load: int, seconds: float) -> None: ...
    def cell_starting(self, name: str, total: int) -> None: ...
    def cell_advanced(self, done: int) -> None: ...
    def cell_finished(self, name: str, seconds: float) -> None: ...


@dataclass(frozen=True)
class CellSpec:
    arm: str
    load: int
    probe: str
    repeat: int
    phase: Phase = "drift"

    @property
    def name(self) -> str:
        return cell_name(self.arm, self.load, self.probe, self.repeat, self.phase)


def schedule(plan: Plan) -> list[tuple[str, int, Phase]]:
    """Loads in counterbalanced order: A B for load 1, B A for load 2, ...; drift loads
    first, then cost loads (A B B A with two per arm)."""
    arms = list(plan.arms)
    order: list[tuple[str, int, Phase]] = []
    phases: list[tuple[Phase, int]] = [("drift", plan.loads_per_arm)]
    if cost_runs(plan):
        phases.append(("cost", plan.cost_loads_per_arm))
    for phase, loads in phases:
        for load in range(1, loads + 1):
            for arm in arms if load % 2 else reversed(arms):
                order.append((arm, load, phase))
    return order


def cost_runs(plan: Plan) -> bool:
    """Cost loads need servediff to start the engine (restarts after a death included)."""
    return plan.base_url is None and bool(plan.probes.cost_probes())


def cells_of_load(plan: Plan, arm: str, load: int, phase: Phase = "drift") -> list[CellSpec]:
    if phase == "cost":
        # Speed first, before anything long can hurt the engine; the sweep, which
        # may kill it, last and once per arm.
        probes = plan.probes
        cost = [CellSpec(arm, load, "speed", 0, "cost")] if probes.speed.enabled else []
        cost += [CellSpec(arm, load, "prefix", 0, "cost")] if probes.prefix.enabled else []
        if probes.sweep.enabled and load == 1:
            cost.append(CellSpec(arm, load, "sweep", 0, "cost"))
        return cost
    cells = [CellSpec(arm, load, "score", 0)]
    cells += [CellSpec(arm, load, "repeat", r) for r in range(1, plan.probes.repeat.count + 1)]
    cells += [CellSpec(arm, load, "batch", b) for b in plan.probes.repeat.batch_sizes]
    if plan.probes.concurrency.enabled:
        cells.append(CellSpec(arm, load, "concurrency", 0))
    if plan.probes.generate.enabled:
        cells.append(CellSpec(arm, load, "generate", 0))
    return cells


def ensure_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".servediff-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputDirError(f"{root}: output folder is not writable ({exc.strerror})") from None


def resolve_model(
    plan: Plan, adapter: EngineAdapter, base_dir: Path, say: Callable[[str], None]
) -> tuple[str, dict[str, str], int | None]:
    """The model path as this engine serves it, its weight hashes and declared BOS id."""
    if plan.base_url is not None:
        return plan.model, {}, None
    if plan.model == "smollm2":
        if adapter.model_format == "gguf":
            path, hashes = models.smollm2_gguf(say)
        else:
            path, hashes = models.smollm2_dir(say)
    else:
        path = (base_dir / plan.model).expanduser().resolve()
        hashes = models.weight_hashes(path)
    return str(path), hashes, models.bos_token_id(path)


def nll(logprobs: list[float]) -> float:
    """Sum NLL of a text; fsum so the value does not depend on summation order."""
    return -math.fsum(logprobs)


class Runner:
    def __init__(self, plan: Plan, corpus: Corpus, root: Path, base_dir: Path,
                 observer: Observer) -> None:
        self.plan = plan
        self.corpus = corpus
        self.layout = Layout(root)
        self.base_dir = base_dir
        self.obs = observer
        self.adapter: EngineAdapter = registry.create(plan.engine)

    def run(self) -> None:
        ensure_writable(self.layout.root)
        write_lock(self.layout.root, lock(self.plan, self.corpus))
        pending = [
            (arm, load, phase, todo)
            for arm, load, phase in schedule(self.plan)
            if (todo := self._missing(cells_of_load(self.plan, arm, load, phase)))
        ]
        if not pending:
            self.obs.note("every cell of this plan is already measured; nothing to run")
            return
        model, weights, bos = resolve_model(self.plan, self.adapter, self.base_dir,
                                            self.obs.note)
        for arm, load, phase, todo in pending:
            # A load whose engine failed or died is started again (a new launch of the
            # same load) for the cells it left. A launch that measured something (a
            # sweep point that killed the engine is a measurement) does not count
            # against max_attempts; max_attempts launches in a row without progress end it.
            barren = 0
            while todo and barren < self.plan.launch.max_attempts:
                before = self._progress(todo)
                self._run_load(arm, load, phase, todo, model, weights, bos)
                barren = 0 if self._progress(todo) > before else barren + 1
                todo = self._missing(todo)

    def _missing(self, cells: list[CellSpec]) -> list[CellSpec]:
        return [c for c in cells if not self.layout.cell(c.name).exists()]

    def _progress(self, cells: list[CellSpec]) -> int:
        """Finished cells and recorded sweep points among `cells`."""
        done = sum(self.layout.cell(c.name).exists() for c in cells)
        return done + sum(len(p.sweep) for c in cells if (p := self._sweep_progress(c)))

    def _sweep_progress(self, cell: CellSpec) -> Cell | None:
        path = self.layout.progress(cell.name)
        if cell.probe != "sweep" or not path.exists():
            return None
        return Cell.model_validate(read_versioned(path, SCHEMA_VERSION))

    def _load_record(self, arm: str, load: int, phase: Phase) -> LoadRecord:
        path = self.layout.load(load_name(arm, load, phase))
        if path.exists():
            return LoadRecord.model_validate(read_versioned(path, SCHEMA_VERSION))
        return LoadRecord(arm=arm, load=load, phase=phase)

    def _write_load(self, record: LoadRecord) -> None:
        atomic.write_json(self.layout.load(load_name(record.arm, record.load, record.phase)),
                          record.model_dump(mode="json"))

    def _start(self, arm: str, load: int, phase: Phase, model: str, options: EngineOptions
               ) -> tuple[EngineProcess | None, Launch, str]:
        """Start the arm's engine (nothing for an external endpoint); its launch record."""
        attempt = len(self._load_record(arm, load, phase).launches) + 1
        base: dict[str, Any] = dict(attempt=attempt, options=options.model_dump(mode="json"),
                                    host=HOST, started_at=time.time())
        if self.plan.base_url is not None:
            launch = Launch(**base, command=[], env_diff={}, port=0, pid=0, external=True)
            return None, launch, self.plan.base_url.rstrip("/")
        port = free_port(HOST)
        spec = self.adapter.launch(self.plan.launch.command, model, HOST, port,
                                   self.plan.arms[arm].args, options)
        env = {**spec.env, **self.plan.launch.env, **self.plan.arms[arm].env}
        proc = EngineProcess(spec.argv, env, self.layout.log(load_name(arm, load, phase)),
                             HOST, port)
        base["started_at"] = proc.started_at
        launch = Launch(**base, command=spec.argv, env_diff=env, port=port, pid=proc.pid)
        return proc, launch, f"http://{HOST}:{port}"

    def _run_load(self, arm: str, load: int, phase: Phase, todo: list[CellSpec], model: str,
                  weights: dict[str, str], bos: int | None) -> None:
        record = self._load_record(arm, load, phase)
        options = arm_options(self.plan, arm)
        if phase == "cost":
            options = self.adapter.as_configured(options)
        self.obs.load_starting(arm if phase == "drift" else f"{arm} (cost)", load,
                               len(record.launches) + 1)
        t0 = time.monotonic()
        proc, launch, url = self._start(arm, load, phase, model, options)
        launch.weights_sha256 = weights
        record.launches.append(launch)
        self._write_load(record)
        scoring = self.plan.scoring
        client = self._client(url, proc, scoring.request_timeout_s, scoring.give_up_s)
        try:
            self._wait_ready(proc, client, launch, options, t0)
            if launch.engine.get("bos_token_id") is None and bos is not None:
                launch.engine["bos_token_id"] = bos
                launch.engine["bos_token_id_from"] = "model files"
            self._write_load(record)
            self.obs.load_ready(arm, load, launch.seconds_to_ready or 0.0)
            ids = self._tokenize(client, launch, options) if phase == "drift" else {}
            for cell in todo:
                if cell.probe == "concurrency":
                    self._run_concurrency(cell, client, launch, options)
                elif cell.probe == "generate":
                    self._run_generate(cell, client, launch, options, ids)
                elif cell.probe in ("speed", "prefix"):
                    self._run_cost(cell, client, launch, options)
                elif cell.probe == "sweep":
                    self._run_sweep(cell, url, proc, launch, options)
                else:
                    self._run_cell(cell, client, proc, ids, options, launch.attempt)
                write_manifest(self.layout.root)
        except EngineError as exc:
            launch.error = str(exc)
            self.obs.note(f"{arm} load {load}: {exc}")
            if proc is not None:
                proc.exited_within(2.0)  # so a dying engine is recorded as a death
        finally:
            client.close()
            if proc is not None:
                stop = proc.stop(self.plan.launch.stop_grace_s)
                launch.stop = Stop(**asdict(stop),
                                   gpu_memory_released=stop.gpu_memory_released)
                log = self.layout.log(load_name(arm, load, phase)).read_text(errors="replace")
                launch.capacity = {**self.adapter.capacity_from_log(log), **launch.capacity}
            launch.finished_at = time.time()
            self._write_load(record)
            write_manifest(self.layout.root)

    def _client(self, url: str, proc: EngineProcess | None, timeout_s: float,
                give_up_s: float | None) -> EngineClient:
        """A client whose requests past `timeout_s` wait on the engine only while it works."""
        watch = None if proc is None else Watch(
            EngineActivity(proc.pid), self.plan.launch.stall_window_s,
            give_up_s or 10 * timeout_s)
        return EngineClient(url, timeout_s, watch=watch)

    def _wait_ready(self, proc: EngineProcess | None, client: EngineClient, launch: Launch,
                    options: EngineOptions, t0: float) -> None:
        """Ready = health answers, version read, and one real scoring request completed."""
        deadline = time.monotonic() + self.plan.launch.start_timeout_s
        path = self.adapter.health_path()
        while not client.healthy(path):
            if proc is not None and not proc.alive():
                raise EngineStartError(
                    f"engine exited with code {proc.proc.returncode} before it was ready"
                )
            if time.monotonic() > deadline:
                raise EngineStartError(
                    f"engine not healthy after {self.plan.launch.start_timeout_s:.0f} s"
                )
            time.sleep(0.1)
        info = self.adapter.info(client)
        probe = self.adapter.tokenize(client, "Ready check: one real request.", options)
        launch.cache_isolation = self.adapter.cache_isolation(options)
        launch.prefix_cache = self.adapter.prefix_cache(options)
        if "generate" in self.adapter.capabilities:
            # The first request after a start must find nothing cached.
            first = self.adapter.generate(client, probe, 1, options)
            launch.first_request_cached_tokens = first.cached_tokens
        self.adapter.score(client, [probe], options)
        launch.seconds_to_ready = round(time.monotonic() - t0, 3)
        launch.engine = {**info.raw, "version": info.version, "bos_token_id": info.bos_token_id,
                         "max_model_len": info.max_model_len}
        launch.capacity = dict(info.capacity)

    def _prefix(self, launch: Launch) -> tuple[list[int], str]:
        prefix = self.plan.scoring.prefix
        if prefix == "none":
            return [], "none"
        if prefix == "bos":
            bos = launch.engine.get("bos_token_id")
            if bos is None:
                raise EngineStartError(
                    "scoring.prefix = \"bos\" but neither the engine nor the model files "
                    "declare a BOS token; set scoring.prefix to \"none\" or a token id"
                )
            return [int(bos)], f"bos:{bos}"
        return [int(prefix)], f"id:{prefix}"

    def _tokenize(self, client: EngineClient, launch: Launch, options: EngineOptions
                  ) -> dict[str, tuple[list[int], str]]:
        head, label = self._prefix(launch)
        return {
            t.tag: (head + self.adapter.tokenize(client, t.text, options), label)
            for t in self.corpus.texts
        }

    def _order(self, cell: CellSpec) -> list[str]:
        tags = [t.tag for t in self.corpus.texts]
        if cell.probe == "repeat" and self.plan.probes.repeat.shuffle:
            random.Random(f"{cell.arm}/{cell.load}/{cell.repeat}").shuffle(tags)
        return tags

    def _run_cell(self, cell: CellSpec, client: EngineClient, proc: EngineProcess | None,
                  ids: dict[str, tuple[list[int], str]], options: EngineOptions,
                  attempt: int) -> None:
        order = self._order(cell)
        self.obs.cell_starting(cell.name, len(order))
        conditions = read_conditions()
        started, t0 = time.time(), time.monotonic()
        records: list[Record] = []
        engine_seconds = 0.0
        size = cell.repeat if cell.probe == "batch" else options.batch_size
        for batch_no, batch_tags in enumerate(_chunks(order, size)):
            batch = [ids[tag][0] for tag in batch_tags]
            r0 = time.monotonic()
            try:
                results = self.adapter.score(client, batch, options)
                error = None
            except EngineError as exc:
                results, error = [], str(exc)
            seconds = time.monotonic() - r0
            engine_seconds += seconds
            for i, tag in enumerate(batch_tags):
                token_ids, label = ids[tag]
                records.append(_record(tag, token_ids, label, batch_no, len(batch_tags),
                                       seconds, results[i] if error is None else None, error))
            self.obs.cell_advanced(len(records))
            if error is not None and proc is not None and proc.exited_within(1.0):
                # The rows measured before the death are evidence too: kept apart,
                # so the cell itself stays to be measured again on resume.
                partial = self._cell(cell, attempt, order, started, t0, engine_seconds,
                                     conditions, records)
                path = self.layout.partial(cell.name, attempt)
                atomic.write_json(path, partial.model_dump(mode="json"))
                raise EngineError(
                    f"engine process died during {cell.name} ({len(records)} of {len(order)} "
                    f"rows kept in {path.relative_to(self.layout.root)}): {error}"
                )
        self._finish(self._cell(cell, attempt, order, started, t0, engine_seconds, conditions,
                                records))

    def _run_concurrency(self, cell: CellSpec, client: EngineClient, launch: Launch,
                         options: EngineOptions) -> None:
        spec = self.plan.probes.concurrency
        head, _ = self._prefix(launch)
        stream = self._stream(client, options)
        limit = launch.engine.get("max_model_len")
        prompts, skipped = {}, []
        for length in spec.lengths:
            if limit is not None and length + spec.max_tokens > int(limit):
                skipped.append(Skipped(length=length, reason=f"prompt + {spec.max_tokens} "
                                       f"generated tokens exceed the context of {limit}"))
            else:
                prompts[length] = concurrency.prompt_of_length(stream, head, length)
        kinds = list(spec.kinds)
        if "score" in kinds and self.adapter.concurrent_scoring_gap:
            kinds.remove("score")
            skipped.append(Skipped(kind="score", reason=self.adapter.concurrent_scoring_gap))
        total = len(prompts) * len(spec.levels) * len(kinds)
        out = self._probe_cell(cell, launch, [], total, lambda advanced: concurrency.measure(
            self.adapter, client, options, prompts, spec, kinds, advanced))
        out.prompts, out.skipped = prompts, skipped
        self._finish(out)

    def _run_generate(self, cell: CellSpec, client: EngineClient, launch: Launch,
                      options: EngineOptions, ids: dict[str, tuple[list[int], str]]) -> None:
        spec = self.plan.probes.generate
        tags = [t.tag for t in self.corpus.texts][: spec.texts]
        prompts = {tag: ids[tag][0][: spec.prompt_tokens] for tag in tags}
        self._finish(self._probe_cell(cell, launch, tags, len(prompts), lambda advanced: (
            generate.measure(self.adapter, client, options, prompts, spec.max_tokens,
                             spec.repeats, advanced))))

    def _stream(self, client: EngineClient, options: EngineOptions) -> list[int]:
        """The corpus as one token stream: what cost-probe prompts are cut from."""
        return self.adapter.tokenize(
            client, "\n\n".join(t.text for t in self.corpus.texts), options)

    def _run_cost(self, cell: CellSpec, client: EngineClient, launch: Launch,
                  options: EngineOptions) -> None:
        head, _ = self._prefix(launch)
        stream = self._stream(client, options)
        context = launch.engine.get("max_model_len")
        out = self._cell(cell, launch.attempt, [], time.time(), time.monotonic(), 0.0,
                         read_conditions(), [])
        out.context_length = context
        t0 = time.monotonic()
        if cell.probe == "speed":
            spec = self.plan.probes.speed
            lengths = [n for n in spec.prompt_tokens
                       if context is None or n + spec.max_tokens <= int(context)]
            out.skipped = [Skipped(length=n, reason=f"prompt + {spec.max_tokens} generated "
                                   f"tokens exceed the context of {context}")
                           for n in spec.prompt_tokens if n not in lengths]
            self.obs.cell_starting(cell.name, len(lengths) * (spec.warmup + spec.replicates))
            out.speed = speed.measure(self.adapter, client, options, stream, head, lengths,
                                      spec, self.obs.cell_advanced)
        else:
            pspec = self.plan.probes.prefix
            size = pspec.prefix_tokens or min(4096, int(context or 8192) // 2)
            size = min(size, int(context) - pspec.question_tokens - 1) if context else size
            shared = speed.rotated_prompt(stream, head, size, 0)
            questions = [speed.rotated_prompt(stream, [], pspec.question_tokens, 17 + i)
                         for i in range(pspec.requests)]
            self.obs.cell_starting(cell.name, pspec.requests)
            out.prefix = prefix.measure(self.adapter, client, options, shared, questions,
                                        self.obs.cell_advanced)
        out.wall_seconds = out.engine_seconds = round(time.monotonic() - t0, 6)
        self._finish(out)

    def _run_sweep(self, cell: CellSpec, url: str, proc: EngineProcess | None,
                   launch: Launch, options: EngineOptions) -> None:
        """Point by point; progress is kept after each, so a point that kills the engine
        is recorded and the next launch goes on with the point after it."""
        spec = self.plan.probes.sweep
        client = self._client(url, proc, spec.request_timeout_s, spec.give_up_s)
        try:
            out = self._sweep_progress(cell)
            if out is None:
                context = launch.engine.get("max_model_len")
                out = self._cell(cell, launch.attempt, [], time.time(), time.monotonic(), 0.0,
                                 read_conditions(), [])
                out.context_length = context
                out.sweep_plan = sweep.points(spec, None if context is None else int(context))
                if not out.sweep_plan:
                    out.skipped = [Skipped(reason="the engine reports no context length and "
                                           "the plan gives no sweep lengths")]
            head, _ = self._prefix(launch)
            stream = self._stream(client, options)
            done = {(p.length, p.level) for p in out.sweep}
            self.obs.cell_starting(cell.name, len(out.sweep_plan))
            self.obs.cell_advanced(len(done))
            live = sweep.Liveness(
                exited=(lambda: proc.exit_status(2.0)) if proc else (lambda: None),
                healthy=lambda: client.healthy(self.adapter.health_path()),
                log_tail=lambda: tail(proc.log_path) if proc else "")
            for length, level in out.sweep_plan:
                if (length, level) in done:
                    continue
                point = sweep.send(self.adapter, client, options, stream, head, length, level,
                                   spec, live, launch.attempt, watched=proc is not None)
                out.sweep.append(point)
                out.engine_seconds = round(out.engine_seconds + point.seconds, 6)
                atomic.write_json(self.layout.progress(cell.name), out.model_dump(mode="json"))
                self.obs.cell_advanced(len(out.sweep))
                if point.outcome in ("death", "hang", "timeout"):
                    last = {(p.length, p.level) for p in out.sweep} >= set(out.sweep_plan)
                    if last:
                        # Nothing is left to measure: no cold start just to close the cell.
                        self._finish_sweep(out, cell)
                    raise EngineError(f"sweep: {point.outcome} at {length} tokens x {level} "
                                      "(recorded as a measurement"
                                      + ("" if last else "; the engine is restarted") + ")")
            self._finish_sweep(out, cell)
        finally:
            client.close()

    def _finish_sweep(self, out: Cell, cell: CellSpec) -> None:
        out.wall_seconds = round(time.time() - out.started_at, 6)
        self._finish(out)
        self.layout.progress(cell.name).unlink(missing_ok=True)

    def _probe_cell(self, cell: CellSpec, launch: Launch, order: list[str], total: int,
                    measure: Callable[[Callable[[int], None]], list[Group]]) -> Cell:
        """A cell of groups of identical requests; every second of it waits on the engine."""
        self.obs.cell_starting(cell.name, total)
        conditions = read_conditions()
        started, t0 = time.time(), time.monotonic()
        groups = measure(self.obs.cell_advanced)
        out = self._cell(cell, launch.attempt, order, started, t0, time.monotonic() - t0,
                         conditions, [])
        out.groups = groups
        return out

    def _finish(self, out: Cell) -> None:
        name = cell_name(out.arm, out.load, out.probe, out.repeat, out.phase)
        atomic.write_json(self.layout.cell(name), out.model_dump(mode="json"))
        self.obs.cell_finished(name, out.wall_seconds)

    @staticmethod
    def _cell(cell: CellSpec, attempt: int, order: list[str], started: float, t0: float,
              engine_seconds: float, conditions: Conditions, records: list[Record]) -> Cell:
        return Cell(
            arm=cell.arm, load=cell.load, phase=cell.phase,
            probe=cell.probe,  # type: ignore[arg-type]
            repeat=cell.repeat, launch=attempt, order=order, started_at=started,
            wall_seconds=round(time.monotonic() - t0, 6),
            engine_seconds=round(engine_seconds, 6), conditions=conditions, records=records,
        )


def _record(tag: str, token_ids: list[int], prefix: str, batch: int, batch_size: int,
            seconds: float, result: Scored | None, error: str | None) -> Record:
    """One raw row: what was sent, what came back, and whether it can be trusted."""
    if result is None:
        return Record(tag=tag, token_ids=token_ids, prefix=prefix, n_tokens=len(token_ids),
                      n_scored=0, token_logprobs=[], sum_nll=None, server_prompt_tokens=None,
                      batch=batch, batch_size=batch_size, seconds=round(seconds, 6),
                      status="error", error=error)
    return Record(
        tag=tag, token_ids=token_ids, prefix=prefix, n_tokens=len(token_ids),
        n_scored=len(result.token_logprobs), token_logprobs=result.token_logprobs,
        sum_nll=nll(result.token_logprobs) if result.invalid is None else None,
        server_prompt_tokens=result.server_prompt_tokens, batch=batch, batch_size=batch_size,
        seconds=round(seconds, 6), status="ok" if result.invalid is None else "invalid",
        error=result.invalid,
    )


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


class SilentObserver:
    """An Observer that shows nothing (benchmarks, tests, library use)."""

    def note(self, message: str) -> None:
        pass

    def load_starting(self, arm: str, load: int, attempt: int) -> None:
        pass

    def load_ready(self, arm: str, load: int, seconds: float) -> None:
        pass

    def cell_starting(self, name: str, total: int) -> None:
        pass

    def cell_advanced(self, done: int) -> None:
        pass

    def cell_finished(self, name: str, seconds: float) -> None:
        pass
