"""Adapter for the embedded engine: HF transformers in a servediff-owned process.

Launches `python -m servediff.engines.hf_server`; speaks the vLLM dialect
through openai_api.py. This module never imports torch.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar, Literal

from pydantic import Field

from servediff.engines import openai_api
from servediff.engines.base import EngineAdapter, EngineInfo, EngineOptions, LaunchSpec, Scored
from servediff.engines.transport import EngineClient
from servediff.errors import EngineRequestError


class TransformersOptions(EngineOptions):
    device: str = "auto"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    threads: int = Field(default=0, ge=0)


class TransformersAdapter(EngineAdapter):
    name = "transformers"
    capabilities: ClassVar[frozenset[str]] = frozenset({"score", "version", "reload"})
    options_model = TransformersOptions

    def launch(
        self, model: str, host: str, port: int, args: list[str], options: EngineOptions
    ) -> LaunchSpec:
        assert isinstance(options, TransformersOptions)
        argv = [
            sys.executable, "-m", "servediff.engines.hf_server",
            "--model", model, "--host", host, "--port", str(port),
            "--device", options.device, "--dtype", options.dtype,
            "--attn-implementation", options.attn_implementation,
            "--threads", str(options.threads),
            *args,
        ]
        return LaunchSpec(argv=argv, env={})

    def info(self, client: EngineClient) -> EngineInfo:
        raw: dict[str, Any] = client.get_json("/version")
        return EngineInfo(
            version={"engine": raw.get("engine"), **raw.get("versions", {})},
            bos_token_id=raw.get("bos_token_id"),
            max_model_len=raw.get("max_model_len"),
            raw=raw,
        )

    def tokenize(self, client: EngineClient, text: str) -> list[int]:
        body = client.post_json("/tokenize", {"prompt": text, "add_special_tokens": False})
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            raise EngineRequestError(f"/tokenize answered without tokens: {str(body)[:200]}")
        return [int(t) for t in tokens]

    def score(self, client: EngineClient, batch: list[list[int]]) -> list[Scored]:
        body = client.post_json("/v1/completions", openai_api.score_payload("default", batch))
        return openai_api.parse_scores(body, batch)
