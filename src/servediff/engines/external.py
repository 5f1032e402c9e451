"""Adapter for an external OpenAI-compatible endpoint that servediff does not start.

No reloads are possible, so across-load drift cannot be measured; the plan is
refused with more than one load per arm, and the report says so. Scoring uses
the vLLM dialect (`prompt_logprobs`) or the OpenAI `echo` form; tokenizing uses
a vLLM-style `/tokenize`, which many OpenAI-compatible servers provide.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from servediff.engines import openai_api
from servediff.engines.base import (
    EngineAdapter,
    EngineInfo,
    EngineOptions,
    Generated,
    Scored,
)
from servediff.engines.transport import EngineClient


class ExternalOptions(EngineOptions):
    score_form: Literal["prompt_logprobs", "echo"] = "prompt_logprobs"
    # The served model name; default: the first one /v1/models lists.
    served_model: str | None = None


class ExternalAdapter(EngineAdapter):
    name = "openai"
    capabilities: ClassVar[frozenset[str]] = frozenset({"score", "generate", "version"})
    options_model = ExternalOptions

    def __init__(self) -> None:
        self._served: str | None = None

    def health_path(self) -> str:
        return "/v1/models"

    def cache_isolation(self, options: EngineOptions) -> str:
        return "unknown: an external endpoint's cache is not under servediff's control"

    def prefix_cache(self, options: EngineOptions) -> None:
        return None

    def info(self, client: EngineClient) -> EngineInfo:
        first = openai_api.first_model(client)
        self._served = str(first["id"])
        return EngineInfo(version={"engine": "external", "model": self._served},
                          bos_token_id=None, max_model_len=first.get("max_model_len"),
                          raw={"model": first})

    def _model(self, options: EngineOptions) -> str | None:
        assert isinstance(options, ExternalOptions)
        return options.served_model or self._served

    def tokenize(self, client: EngineClient, text: str, options: EngineOptions) -> list[int]:
        return openai_api.tokenize(client, text, model=self._model(options))

    def score(self, client: EngineClient, batch: list[list[int]],
              options: EngineOptions) -> list[Scored]:
        assert isinstance(options, ExternalOptions)
        echo = options.score_form == "echo"
        body = client.post_json("/v1/completions",
                                openai_api.score_payload(self._model(options), batch, echo=echo))
        return openai_api.parse_scores(body, batch, echo=echo)

    def generate(self, client: EngineClient, ids: list[int], max_tokens: int,
                 options: EngineOptions) -> Generated:
        body = client.post_json("/v1/completions",
                                openai_api.generate_payload(self._model(options), ids, max_tokens))
        return openai_api.parse_generated(body)
