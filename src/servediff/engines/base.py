"""The adapter interface every engine implements, and what a score result is.

The split follows lm-evaluation-harness's TemplateAPI: `EngineClient`
(transport.py) owns HTTP, timeouts, retries and concurrency; an adapter only
says how to launch its engine, builds payloads and parses responses. The
runner asks an adapter only for what its `capabilities` declare (`Capability`):

    score     teacher-forced prompt logprobs
    generate  greedy generation
    stream    a streamed greedy generation, timed per chunk (the speed probe's steady mode)
    capacity  KV pool size / slots as the engine reports them
    version   engine version or build
    metrics   a Prometheus /metrics endpoint
    reload    servediff starts and stops it (not an external endpoint)
"""

from __future__ import annotations

import importlib.util
import shutil
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from servediff.engines.transport import EngineClient

if TYPE_CHECKING:
    from servediff.engines.builds import BuildSource
    from servediff.evidence import Launch

# What an adapter can do (the module's docstring says each); a probe or a plan asks for one
Capability = Literal["score", "generate", "stream", "capacity", "version", "metrics", "reload"]


class EngineOptions(BaseModel):
    """Per-arm options an adapter understands; subclasses add fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Texts per scoring request; the engine decides how it batches them.
    batch_size: int = Field(default=1, ge=1)


@dataclass(frozen=True)
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]
    # What the adapter added or stood in for, said in the launch record.
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Scored:
    """One prompt's teacher-forced result as the engine returned it."""

    token_logprobs: list[float]
    ranks: list[int] | None
    server_prompt_tokens: int | None
    # Why the row cannot be trusted (count mismatch, ...), or None.
    invalid: str | None = None


@dataclass(frozen=True)
class Generated:
    """One greedy generation: the tokens, each one's logprob, what the server counted."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    prompt_tokens: int | None = None
    # Prompt tokens the server took from its prefix cache, where it reports them.
    cached_tokens: int | None = None


@dataclass(frozen=True)
class Streamed:
    """One streamed generation, timed on arrival: each chunk's time after the request was
    sent, and the tokens the server counted."""

    chunk_s: list[float]
    total_s: float
    completion_tokens: int
    prompt_tokens: int | None = None

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_s[0] if self.chunk_s else None

    @property
    def itl_s(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_s, self.chunk_s[1:], strict=False)]


@dataclass(frozen=True)
class EngineInfo:
    version: dict[str, Any]
    bos_token_id: int | None
    max_model_len: int | None
    # KV pool in tokens and concurrent sequences, as the engine reports them.
    capacity: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


def fill_template(template: list[str], model: str, host: str, port: int) -> list[str]:
    """Replace {model}, {host}, {port} in each argument of a launch template."""
    values = {"model": model, "host": host, "port": str(port)}
    out = []
    for part in template:
        for key, value in values.items():
            part = part.replace("{" + key + "}", value)
        out.append(part)
    return out


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def flag_values(command: Sequence[str], names: Mapping[str, str]) -> dict[str, int]:
    """The whole-number values a command gives its flags (`-f N` or `-f=N`), by the name
    each flag sets; the last one given wins, as with the engines' own parsers."""
    found: dict[str, int] = {}
    for i, part in enumerate(command):
        flag, _, value = part.partition("=")
        if flag in names:
            value = value or (command[i + 1] if i + 1 < len(command) else "")
            if value.isdigit():
                found[names[flag]] = int(value)
    return found


class EngineAdapter(ABC):
    """What servediff needs of an engine: how to launch it, read what it reports, tokenize,
    score and generate. Transport, retries and timing are the base's; an adapter builds
    payloads and parses answers."""

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[Capability]]
    options_model: ClassVar[type[EngineOptions]] = EngineOptions
    # What a built-in model is served as: a HF folder or a GGUF file.
    model_format: ClassVar[Literal["hf-dir", "gguf"]] = "hf-dir"
    default_command: ClassVar[list[str]] = []
    # The flag that gives the engine a hub revision, for an engine that loads a model by
    # its hub id (`org/name`); None: the engine is given folders and files only.
    hub_revision_flag: ClassVar[str | None] = None
    # Said wherever the engine is listed, e.g. that it never ran against the real thing.
    caveat: ClassVar[str | None] = None
    # A typical cold start in seconds, for the rough duration estimate before a run
    # (estimate.py); the load records hold the measured ones.
    typical_start_s: ClassVar[float] = 60.0
    # The option that switches the engine's prefix cache (True on, False off: the drift
    # default, None: as the engine and the arm's args leave it), and what each state is
    # called in the load record. None: the engine has no prefix cache.
    cache_option: ClassVar[str | None] = None
    cache_states: ClassVar[dict[bool | None, str]] = {}
    # The JIT and autotune caches the engine is known to use: environment variable ->
    # what it holds (caches.py points them at fresh or shared directories per load).
    caches: ClassVar[dict[str, str]] = {}
    # Why scoring requests are left out of the concurrency probe, when one score costs
    # far more than one request (llama-server's one request per position).
    concurrent_scoring_gap: ClassVar[str | None] = None
    # The engine's name in what `info` records (a launch record's `version.engine`), where
    # it is not `name`: the analysis finds a launch record's adapter by it.
    recorded_name: ClassVar[str | None] = None
    # `servediff init`'s example arms: a baseline, a candidate with the kind of flag people
    # change and want to know the cost and drift of, and what the candidate changes.
    example_arms: ClassVar[tuple[dict[str, Any], dict[str, Any], str]] = (
        {}, {"args": []}, "the flag under test")

    def builds(self) -> BuildSource | None:
        """Where this engine's builds come from, for `servediff bisect` (None: it names
        none)."""
        return None

    def example_options(self, small: bool) -> list[str]:
        """The `[engine_options]` lines (TOML, with comments) `servediff init` writes; none
        by default. `small`: a plan sized for a laptop CPU."""
        return []

    def prompt_sizes(self, launch: Launch) -> dict[str, int]:
        """The token sizes this launch computed a long prompt in (a prompt chunk, a
        micro-batch), by the engine's own names, from its command, environment and what it
        reported at start; none for an engine that does not split prompts or does not say
        (analysis/boundaries.py)."""
        return {}

    def bucket_floor(self, launch: Launch) -> int | None:
        """The smallest length bucket of a launch that pads prompts to buckets (None: it
        computes each prompt as sent)."""
        return None

    def launch(self, template: list[str] | None, model: str, host: str, port: int,
               args: list[str], options: EngineOptions) -> LaunchSpec:
        argv = fill_template(template or self.default_command, model, host, port)
        return LaunchSpec(argv=[*argv, *self.option_args(options), *args],
                          env=self.option_env(options))

    def option_args(self, options: EngineOptions) -> list[str]:
        return []

    def option_env(self, options: EngineOptions) -> dict[str, str]:
        return {}

    @classmethod
    def locate(cls) -> str | None:
        """Where this engine is found on this machine (said by `servediff engines`), or
        None. Nothing is imported: finding a module or an executable is enough."""
        return shutil.which(cls.default_command[0]) if cls.default_command else None

    @abstractmethod
    def info(self, client: EngineClient) -> EngineInfo: ...

    @abstractmethod
    def tokenize(self, client: EngineClient, text: str, options: EngineOptions) -> list[int]: ...

    @abstractmethod
    def score(self, client: EngineClient, batch: list[list[int]],
              options: EngineOptions) -> list[Scored]: ...

    def generate(self, client: EngineClient, ids: list[int], max_tokens: int,
                 options: EngineOptions) -> Generated:
        """Greedy generation (temperature 0) after the prompt `ids`."""
        raise NotImplementedError(f"{self.name} cannot generate")

    def stream(self, client: EngineClient, ids: list[int], max_tokens: int,
               options: EngineOptions) -> Streamed:
        """A streamed greedy generation of exactly `max_tokens` tokens, timed per chunk
        (the speed probe's steady mode); engines with the "stream" capability."""
        raise NotImplementedError(f"{self.name} cannot stream")

    def cache_isolation(self, options: EngineOptions) -> str:
        """How this arm's prefix cache is handled, said in the load record."""
        if self.cache_option is None:
            return "no prefix cache in this engine"
        return self.cache_states[self.prefix_cache(options)]

    def as_configured(self, options: EngineOptions) -> EngineOptions:
        """The options of a cost load: the engine as the arm's own flags configure it,
        without the cache isolation servediff adds for drift work unless the arm
        asked for a cache setting itself (None: the engine's own behaviour)."""
        field = self.cache_option
        if field is None or field in options.model_fields_set:
            return options
        return options.model_copy(update={field: None})

    def prefix_cache(self, options: EngineOptions) -> bool | None:
        """Whether this arm serves with a prefix cache on (None: as the engine defaults)."""
        if self.cache_option is None:
            return False
        state: bool | None = getattr(options, self.cache_option)
        return state

    def refused_itself(self, returncode: int, log_text: str) -> bool:
        """Whether an engine that ended before it was ready gave up on its own (a refusal:
        the configuration does not exist on this stack) rather than being killed: an exit
        code of its own, not a signal."""
        return returncode > 0

    def fault_in_log(self, log_text: str) -> str | None:
        """Why the engine's log shows this load cannot be trusted (SGLang: a call of the
        sgl_kernel stand-in), or None."""
        return None

    def capacity_from_log(self, log_text: str) -> dict[str, Any]:
        """Capacity the engine only prints at start-up (vLLM's KV cache line)."""
        return {}

    def startup_from_log(self, log_text: str) -> dict[str, Any]:
        """What the engine printed about its start-up: compile time, compile-cache use."""
        return {}

    def health_path(self) -> str:
        return "/health"
