"""The raw evidence schema: load records, cells, request records, conditions.

These are the only things the measuring stage writes. Each file carries
`schema_version`; analysis reads them back through `bundle.py` and nothing
else.

Schema history (raw files; the summary's is docs/summary.md):
- 1: the first.
- 2: a batch cell's size has its own field (`batch_size`; schema 1 kept it in `repeat`),
  and the prefix probe's rows are its own rows in `data` (schema 1: a `prefix` field).
  Schema 1 files are read as schema 2 (`Cell`'s reader moves both).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

SCHEMA_VERSION = 2
# the older raw schema versions this servediff reads, each upgraded as it is read, and
# every version it reads
UPGRADED = (1,)
READABLE = (*UPGRADED, SCHEMA_VERSION)

# What a drift probe request asks for: a teacher-forced score or a greedy generation.
RequestKind = Literal["score", "generate"]


class Raw(BaseModel):
    """The base of every raw evidence file's model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class GpuReading(BaseModel):
    """One GPU as NVML read it (more fields are kept as read)."""

    model_config = ConfigDict(extra="allow")

    index: int
    name: str
    memory_used_mb: int | None = None
    memory_total_mb: int | None = None
    temperature_c: int | None = None
    utilization_pct: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    power_w: float | None = None
    # clock reductions that slow a measurement (thermal, power, hardware); None: not read
    throttle: list[str] | None = None
    compute_pids: list[int] | None = None
    # compute processes on this GPU that are not the engine's
    foreign_pids: list[int] | None = None


class ProcessUse(BaseModel):
    """A process that is neither servediff nor the engine, and the CPU it used."""

    model_config = ConfigDict(extra="forbid")

    pid: int
    name: str
    # CPU seconds per second since the previous reading
    cpu_cores: float


class Conditions(Raw):
    """What the box was doing when a cell ran."""

    time: float
    cpu_model: str
    cpu_count: int
    loadavg: tuple[float, float, float]
    mem_total_mb: int | None
    mem_available_mb: int | None
    python: str
    packages: dict[str, str | None]
    gpus: list[GpuReading] = Field(default_factory=list)
    # None in bundles written before these were read
    host: str | None = None
    cpu_freq_mhz: float | None = None
    engine_pids: list[int] = Field(default_factory=list)
    # CPU used by other processes since the previous reading (cores), the busiest of them
    foreign_cpu_cores: float | None = None
    foreign: list[ProcessUse] = Field(default_factory=list)
    # Where the cell ran: the Ray node (None: where servediff ran) and the GPUs the engine
    # was given (CUDA_VISIBLE_DEVICES; None: not set, it saw every GPU in `gpus`).
    node: str | None = None
    gpus_given: str | None = None
    # the operating system (platform.system(); None in bundles written before it was read)
    system: str | None = None


class Record(Raw):
    """One prompt sent and what came back, raw."""

    tag: str
    token_ids: list[int]
    prefix: str
    n_tokens: int
    n_scored: int
    token_logprobs: list[float]
    sum_nll: float | None
    server_prompt_tokens: int | None
    batch: int
    batch_size: int
    seconds: float
    status: Literal["ok", "invalid", "error"]
    error: str | None = None


class Response(Raw):
    """One of the identical requests of a concurrency group."""

    index: int
    status: Literal["ok", "error"]
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    text: str = ""
    # sha256 (16 hex) of the generated ids and their logprobs (score requests: the
    # prompt logprobs): what is compared.
    hash: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    seconds: float = 0.0
    error: str | None = None


class Group(Raw):
    """`requests` identical requests for one prompt, `level` in flight at once.

    `kind` "generate": greedy generations (generated ids and their logprobs);
    "score": teacher-forced scoring of the prompt itself (its prompt logprobs).
    """

    kind: RequestKind = "generate"
    # generate probe: the corpus text the prompt was cut from
    tag: str | None = None
    length: int
    level: int
    max_tokens: int
    prompt_sha256: str
    responses: list[Response]


class SpeedSample(Raw):
    """One replicate of the speed probe at one prompt length.

    `ttft_s` is the latency of a one-token request; `total_s` of a request for
    `generated` tokens on an equal-length prompt of its own. With `concurrency` above 1,
    that many requests of each kind were sent at once: `ttft_s`, `total_s` and
    `generated` are their medians, and `throughput_tok_s` is the output tokens of all
    the long requests over the time from sending them to the last answer."""

    replicate: int
    warmup: bool
    prompt_tokens: int
    concurrency: int = 1
    throughput_tok_s: float | None = None
    achieved_prompt_tokens: int | None = None
    ttft_s: float | None = None
    total_s: float | None = None
    generated: int = 0
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    # burst: `concurrency` requests of each kind sent at once (a request for one token
    # gives the TTFT); steady: `requests` streamed requests with `concurrency` in flight, a
    # new one started as one finished (at `request_rate` per second, Poisson arrivals,
    # where the plan gives one): TTFT and ITL from the streamed tokens' arrival times
    mode: Literal["burst", "steady"] = "burst"
    requests: int | None = None
    itl_s: float | None = None
    status: Literal["ok", "error"] = "ok"
    error: str | None = None


# ok / slow (answered after the request timeout while the engine worked) / error
# response / hang (no answer, no work) / timeout (no answer by the bound, engine busy) /
# death (process exited)
Outcome = Literal["ok", "slow", "error", "hang", "timeout", "death"]


class SweepPoint(Raw):
    """`level` prompts of `length` tokens sent at once, and what became of the server."""

    length: int
    level: int
    outcome: Outcome
    # server-counted prompt tokens per request that came back
    achieved_prompt_tokens: list[int | None] = Field(default_factory=list)
    # prompt tokens each request got from a prefix cache, where the engine says (must be 0:
    # every sweep prompt is unique from its first token)
    cached_tokens: list[int | None] = Field(default_factory=list)
    # every achieved count within the plan's tolerance of `length`
    achieved_ok: bool | None = None
    seconds: float = 0.0
    # how long each request took (None in bundles written before this was recorded)
    request_seconds: list[float] | None = None
    http_status: int | None = None
    error: str | None = None
    # death: how the process ended and what it printed last
    returncode: int | None = None
    signal: str | None = None
    log_tail: str | None = None
    health_answered: bool | None = None
    launch: int = 1


# The probe names of cells: the registry's (probes/settings.py); the repeat probe's cells
# are "score", "repeat" and "batch".
ProbeName = str
Phase = Literal["drift", "cost"]


class Skipped(Raw):
    """Something a probe planned and did not send, and why."""

    reason: str
    # the prompt length or the request kind that was left out, where one was
    length: int | None = None
    kind: RequestKind | None = None


class Cell(Raw):
    """One measured (arm, load, probe, repeat) unit, as its file holds it: what was sent and
    what came back (per probe: records, groups, speed, sweep or a probe's own `data`), its
    clocks, and the conditions of the box before and after it."""

    schema_version: int = SCHEMA_VERSION
    arm: str
    load: int
    phase: Phase = "drift"
    probe: ProbeName
    # the repeat number (0: the first pass, and every probe's single cell)
    repeat: int
    # the batch probe's batch size (None: any other probe)
    batch_size: int | None = None
    launch: int
    order: list[str]
    started_at: float
    wall_seconds: float
    engine_seconds: float
    conditions: Conditions
    # read when the cell finished: what every other process did during it
    conditions_after: Conditions | None = None
    records: list[Record]
    # concurrency probe: the groups, and the prompt ids per length
    groups: list[Group] = Field(default_factory=list)
    prompts: dict[int, list[int]] = Field(default_factory=dict)
    skipped: list[Skipped] = Field(default_factory=list)
    # cost probes
    speed: list[SpeedSample] = Field(default_factory=list)
    sweep: list[SweepPoint] = Field(default_factory=list)
    # the sweep's planned points, in order, and the context length they came from
    sweep_plan: list[tuple[int, int]] = Field(default_factory=list)
    context_length: int | None = None
    # a probe's own rows, for a probe whose results have no field above: each a row of
    # the probe's own model, which its module writes and reads back (probes/base.py)
    data: list[dict[str, JsonValue]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """A schema-1 cell as schema 2 has it: a batch cell's size out of `repeat`, the
        prefix probe's rows out of `prefix` into `data`. Its schema_version stays as read."""
        if not isinstance(data, dict) or data.get("schema_version") != 1:
            return data
        data = dict(data)
        if data.get("probe") == "batch" and "batch_size" not in data:
            data["batch_size"], data["repeat"] = data.get("repeat"), 0
        rows = data.pop("prefix", None)
        if isinstance(rows, list) and rows:
            data["data"] = [*rows, *(data.get("data") or [])]
        return data

    @property
    def observations(self) -> int:
        """How many raw observations the cell holds: rows, responses, samples, points."""
        return (len(self.records) + sum(len(g.responses) for g in self.groups)
                + len(self.speed) + len(self.sweep) + len(self.data))

    @property
    def name(self) -> str:
        """The cell's name, as its file is called."""
        return cell_name(self.arm, self.load, self.probe, self.repeat, self.phase,
                         self.batch_size)


class Stop(Raw):
    died_before_stop: bool
    returncode: int | None
    signal: str | None
    needed_kill: bool
    stop_seconds: float
    port_closed: bool
    # No process of the engine's process group is left alive.
    group_gone: bool
    # GPU memory (MiB by pid) held by the engine's processes before the stop and
    # still held after it; None without a GPU. Released = nothing held after.
    gpu_memory_before_mb: dict[int, int] | None = None
    gpu_memory_after_mb: dict[int, int] | None = None
    gpu_memory_released: bool | None = None
    log_tail: str
    # Stopped by a later `servediff run` of this directory, because the servediff that
    # started it ended first (killed); `found_alive`: its processes were still running.
    at_resume: bool = False
    found_alive: bool | None = None


# fresh: new empty JIT/autotune cache directories per load; shared: one set per arm,
# kept across its loads; as-is: the user's environment, untouched
CachePolicy = Literal["fresh", "shared", "as-is"]


class CacheDir(Raw):
    """One JIT or autotune cache of a launch: where it was and what it held."""

    env: str
    what: str
    # "plan-env": the plan keeps this cache where its env puts it (launch.keep_caches:
    # compiled code kept across the loads of a machine, say); servediff left it as given
    policy: CachePolicy | Literal["plan-env"]
    # None under as-is when the variable was not set (the engine's own default place)
    path: str | None
    empty_at_start: bool | None
    bytes_at_start: int | None
    bytes_after: int | None = None
    # a fresh load's directory, removed after its sizes were recorded
    removed: bool = False


class Gate(Raw):
    """What the quiet-box check before this launch found (quiet.py)."""

    quiet: bool
    action: Literal["refuse", "mark"]
    waited_s: float
    reasons: list[str]
    foreign_cpu_cores: float | None = None
    loadavg: float | None = None
    foreign: list[ProcessUse] = Field(default_factory=list)


class ModelSource(Raw):
    """The served model as the plan named it and as the engine was given it."""

    given: str
    kind: Literal["builtin", "path", "hub", "endpoint"]
    # what the engine was given: a folder, a file, a hub id, the endpoint's name for it
    served: str
    # A hub id: the repository, the revision the plan gave (None: the default branch) and
    # the commit huggingface_hub's local cache resolves it to. hub_commit None: it was not
    # in the cache, the engine was given the id and servediff hashed no weights.
    hub_repo: str | None = None
    hub_revision: str | None = None
    hub_commit: str | None = None


class Launch(Raw):
    """One start of a load's engine: how it was started (command, environment, caches,
    gate), what it reported about itself when ready, how it ended (error, refusal, stop)."""

    attempt: int
    command: list[str]
    env_diff: dict[str, str]
    options: dict[str, Any]
    host: str
    port: int
    pid: int
    started_at: float
    # The engine runs in its own session and process group, led by `pid`.
    pgid: int | None = None
    # The JIT and autotune caches it started with (see caches.py); None: not recorded.
    cache_policy: CachePolicy | None = None
    caches: list[CacheDir] = Field(default_factory=list)
    # The quiet-box check before the launch (None: not gated).
    gate: Gate | None = None
    # A combined load's check before its cost part (None: not gated, or no cost part).
    cost_gate: Gate | None = None
    # The machine it ran on: host name and GPU models (None in older bundles), and its
    # room fingerprint and boot, hashed (room.py; None: older bundles, or not readable).
    machine: str | None = None
    gpu_models: list[str] = Field(default_factory=list)
    room_id: str | None = None
    boot_id: str | None = None
    # The Ray node id of a load run on a cluster (None: run where servediff ran), and the
    # GPUs the engine was given (CUDA_VISIBLE_DEVICES; None: not set, it saw every GPU).
    node: str | None = None
    cuda_visible_devices: str | None = None
    # What the adapter added to the launch or stood in for (SGLang on a CPU: its CPU flags,
    # the sgl_kernel stand-in, the KV pool servediff sized).
    notes: list[str] = Field(default_factory=list)
    # The wheel set the engine was installed from where it reached no package registry
    # (scripts/gpu_carry.py: its name, the manifest's sha256 and every package's version),
    # read from the engine's PYTHONPATH; None: not installed that way.
    wheel_set: dict[str, Any] | None = None
    # What the engine printed about its start-up (vLLM: engine_init_s,
    # compile_warmup_s, compile_cache).
    startup: dict[str, Any] = Field(default_factory=dict)
    seconds_to_ready: float | None = None
    engine: dict[str, Any] = Field(default_factory=dict)
    # KV pool tokens, slots, context: as the engine reported them at this launch.
    capacity: dict[str, Any] = Field(default_factory=dict)
    # An external endpoint: nothing was started or stopped.
    external: bool = False
    # How the prefix cache was handled, and the cached prompt tokens the engine
    # reported for the first request after the start (must be 0; None: not reported).
    cache_isolation: str | None = None
    # Whether this launch served with a prefix cache on (None: unknown, an external endpoint).
    prefix_cache: bool | None = None
    first_request_cached_tokens: int | None = None
    weights_sha256: dict[str, str] = Field(default_factory=dict)
    # None in bundles written before hub ids
    model_source: ModelSource | None = None
    error: str | None = None
    # The engine exited with an error of its own before it was ready: its message (a flag
    # it refuses, a configuration it cannot serve). None: it started, or failed otherwise.
    engine_refusal: str | None = None
    stop: Stop | None = None
    finished_at: float | None = None

    # The engine's own report is kept raw (`engine`); these read the parts analysis uses.
    def context_length(self) -> int | None:
        value = self.engine.get("max_model_len")
        return int(value) if value else None

    def engine_versions(self) -> dict[str, str | None]:
        versions = self.engine.get("version") or {}
        return {str(k): None if v is None else str(v) for k, v in versions.items()}

    def device(self) -> str:
        return str(self.engine.get("device_name") or self.engine.get("device"))


# A launch's error when servediff stopped it, not the engine: an interrupt (Ctrl-C, kill,
# a time budget), and servediff's own end before it could stop the engine (runner.reap).
INTERRUPTED = "interrupted: servediff was stopped (SIGINT or SIGTERM)"
ENDED = "servediff ended before it stopped this launch"
STOPPED_BY_SERVEDIFF = (INTERRUPTED, ENDED)


class LoadRecord(Raw):
    schema_version: int = SCHEMA_VERSION
    arm: str
    load: int
    phase: Phase = "drift"
    # A drift load that also measured the cost cells of the cost load of its number
    # (loads = "combined"): they keep their cost names and are measured by these launches.
    combined: bool = False
    launches: list[Launch] = Field(default_factory=list)
    # The quiet-box gate that refused to start this load (the run stopped there, exit 3);
    # a later run that measures the load keeps it as history.
    refused: Gate | None = None

    @property
    def name(self) -> str:
        return load_name(self.arm, self.load, self.phase)

    def did_not_start(self, attempts: int) -> str | None:
        """The engine's message when at least `attempts` launches of this load were all
        refused by the engine with that one message (its configuration does not exist on
        this stack), else None. A launch servediff itself stopped before it was ready (an
        interrupt, or servediff's own end) says nothing either way and is passed over."""
        judged = [x for x in self.launches
                  if not (x.seconds_to_ready is None and x.error in STOPPED_BY_SERVEDIFF)]
        said = {x.engine_refusal for x in judged}
        if len(judged) < attempts or len(said) != 1:
            return None
        return said.pop()


def cell_name(arm: str, load: int, probe: str, repeat: int, phase: str = "drift",
              batch_size: int | None = None) -> str:
    """`<load>-<probe>`, a repeat's `-r<repeat>` or a batch cell's `-b<batch_size>` after."""
    suffix = {"repeat": f"-r{repeat}", "batch": f"-b{batch_size}"}.get(probe, "")
    return f"{load_name(arm, load, phase)}-{probe}{suffix}"


def load_name(arm: str, load: int, phase: str = "drift") -> str:
    """Drift loads are `<arm>-load<N>`, cost loads `<arm>-cost<N>`."""
    return f"{arm}-{'cost' if phase == 'cost' else 'load'}{load}"
