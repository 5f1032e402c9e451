"""The setup a summary describes: corpus, arms, probes and the box."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from servediff.analysis.findings.base import Finding
from servediff.evidence import CachePolicy
from servediff.plan import ProbesSpec


class CorpusSetup(Finding):
    name: str
    texts: int


class ArmSetup(Finding):
    args: list[str]
    env: dict[str, str]
    options: dict[str, JsonValue]
    command: list[str] | None
    launches: int
    external: bool
    seconds_to_ready: list[float]
    capacity: dict[str, JsonValue]
    cache_isolation: list[str]
    first_request_cached_tokens: list[int | None]
    cache_policy: CachePolicy | None = None
    # what the engine printed about each start (compile time, compile-cache use)
    startup: list[dict[str, JsonValue]] = Field(default_factory=list)


class ArmConditions(Finding):
    """What the box was doing while an arm's cells ran (before and after each)."""

    machines: list[str]
    foreign_cpu_cores_max: float | None
    loadavg_max: float | None
    gpu_sm_clock_mhz: list[int]
    gpu_temperature_c_max: int | None
    throttled_cells: int
    busy_cells: int
    gates: int
    gates_not_quiet: int
    # the GPUs an engine of the arm computed on, as NVML listed its processes at a reading
    # ("GPU 0 (NVIDIA H200)", prefixed with the Ray node on a cluster); schema 4
    gpus_used: list[str] = Field(default_factory=list)


class Setup(Finding):
    corpus: CorpusSetup
    prefix: str | int
    loads_per_arm: int
    cost_loads_per_arm: int | None
    # each arm's cost loads where the adaptive rule added some (schema 13)
    cost_loads: dict[str, int] = Field(default_factory=dict)
    # "combined": each drift load also ran the cost load of its number (schema 15)
    loads: Literal["separate", "combined"] = "separate"
    repeats: int
    probes: ProbesSpec
    context_lengths: list[int]
    arms: dict[str, ArmSetup]
    engine_versions: list[str]
    weights_sha256: list[str]
    devices: list[str]
    cpu: list[str]
    gpus: list[str]
    python: list[str]
