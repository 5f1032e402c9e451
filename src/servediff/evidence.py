"""The raw evidence schema: load records, cells, request records, conditions.

These are the only things the measuring stage writes. Each file carries
`schema_version`; analysis reads them back through `bundle.py` and nothing
else.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Conditions(Model):
    """What the box was doing when a cell ran."""

    time: float
    cpu_model: str
    cpu_count: int
    loadavg: tuple[float, float, float]
    mem_total_mb: int | None
    mem_available_mb: int | None
    python: str
    packages: dict[str, str | None]
    gpus: list[dict[str, Any]] = Field(default_factory=list)


class Record(Model):
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


class Cell(Model):
    schema_version: int = SCHEMA_VERSION
    arm: str
    load: int
    probe: Literal["score", "repeat"]
    repeat: int
    launch: int
    order: list[str]
    started_at: float
    wall_seconds: float
    engine_seconds: float
    conditions: Conditions
    records: list[Record]


class Stop(Model):
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


class Launch(Model):
    attempt: int
    command: list[str]
    env_diff: dict[str, str]
    options: dict[str, Any]
    host: str
    port: int
    pid: int
    started_at: float
    seconds_to_ready: float | None = None
    engine: dict[str, Any] = Field(default_factory=dict)
    # KV pool tokens, slots, context: as the engine reported them at this launch.
    capacity: dict[str, Any] = Field(default_factory=dict)
    # An external endpoint: nothing was started or stopped.
    external: bool = False
    weights_sha256: dict[str, str] = Field(default_factory=dict)
    error: str | None = None
    stop: Stop | None = None
    finished_at: float | None = None


class LoadRecord(Model):
    schema_version: int = SCHEMA_VERSION
    arm: str
    load: int
    launches: list[Launch] = Field(default_factory=list)


def cell_name(arm: str, load: int, probe: str, repeat: int) -> str:
    suffix = f"-r{repeat}" if probe == "repeat" else ""
    return f"{arm}-load{load}-{probe}{suffix}"


def load_name(arm: str, load: int) -> str:
    return f"{arm}-load{load}"
