"""The adapter interface every engine implements, and what a score result is.

The split follows lm-evaluation-harness's TemplateAPI: `EngineClient`
(transport.py) owns HTTP, timeouts and retries; an adapter only says how to
launch its engine, builds payloads and parses responses. The runner asks an
adapter only for what its `capabilities` declare.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from servediff.engines.transport import EngineClient


class EngineOptions(BaseModel):
    """Per-arm options an adapter understands; subclasses add fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_size: int = 1


@dataclass(frozen=True)
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Scored:
    """One prompt's teacher-forced result as the engine returned it."""

    token_logprobs: list[float]
    ranks: list[int] | None
    server_prompt_tokens: int | None
    # Why the row cannot be trusted (count mismatch, ...), or None.
    invalid: str | None = None


@dataclass(frozen=True)
class EngineInfo:
    version: dict[str, Any]
    bos_token_id: int | None
    max_model_len: int | None
    raw: dict[str, Any] = field(default_factory=dict)


class EngineAdapter(ABC):
    name: ClassVar[str]
    capabilities: ClassVar[frozenset[str]]
    options_model: ClassVar[type[EngineOptions]] = EngineOptions

    @abstractmethod
    def launch(
        self, model: str, host: str, port: int, args: list[str], options: EngineOptions
    ) -> LaunchSpec: ...

    @abstractmethod
    def info(self, client: EngineClient) -> EngineInfo: ...

    @abstractmethod
    def tokenize(self, client: EngineClient, text: str) -> list[int]: ...

    @abstractmethod
    def score(self, client: EngineClient, batch: list[list[int]]) -> list[Scored]: ...

    def health_path(self) -> str:
        return "/health"
