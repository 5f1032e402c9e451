"""Adapter for an external OpenAI-compatible endpoint that servediff does not start.

No reloads are possible, so across-load drift cannot be measured; the plan is
refused with more than one load per arm, and the report says so. Scoring uses
the vLLM dialect (`prompt_logprobs`) or the OpenAI `echo` form; tokenizing uses
a vLLM-style `/tokenize`, which many OpenAI-compatible servers provide.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from servediff.engines.base import Capability, EngineInfo, EngineOptions
from servediff.engines.completions import CompletionsAdapter, first_model
from servediff.engines.transport import EngineClient


class ExternalOptions(EngineOptions):
    score_form: Literal["prompt_logprobs", "echo"] = "prompt_logprobs"
    # The served model name; default: the first one /v1/models lists.
    served_model: str | None = None


class ExternalAdapter(CompletionsAdapter):
    name = "openai"
    typical_start_s = 0.0  # servediff does not start it
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {"score", "generate", "stream", "version"})
    options_model = ExternalOptions

    @classmethod
    def locate(cls) -> str | None:
        return "external endpoint (give base_url)"

    def health_path(self) -> str:
        return "/v1/models"

    def cache_isolation(self, options: EngineOptions) -> str:
        return "unknown: an external endpoint's cache is not under servediff's control"

    def prefix_cache(self, options: EngineOptions) -> None:
        return None

    def info(self, client: EngineClient) -> EngineInfo:
        first = first_model(client)
        self.served = str(first["id"])
        return EngineInfo(version={"engine": "external", "model": self.served},
                          bos_token_id=None, max_model_len=first.get("max_model_len"),
                          raw={"model": first})

    def served_model(self, options: EngineOptions) -> str | None:
        assert isinstance(options, ExternalOptions)
        return options.served_model or self.served
