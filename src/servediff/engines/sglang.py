"""Adapter for SGLang's native HTTP API.

NOT RUN AGAINST A REAL SGLANG. SGLang cannot be installed on the machines this
project is developed and tested on (its wheel needs the CUDA stack; its CPU
path needs Intel AMX and a kernel package the registries lack), and the GPU
machine has no SGLang either. This adapter follows SGLang's documented API and
is tested against response shapes written from that documentation, nothing
more. Treat its first real run as a validation, not a measurement.

Scoring: `/generate` with `input_ids`, `return_logprob: true`,
`logprob_start_len: 0`, `max_new_tokens: 1`; `meta_info.input_token_logprobs`
holds `[logprob, token_id, text]` per prompt token, the first logprob null.
Capacity and version: `/get_server_info` (`max_total_num_tokens`, `version`).
The deterministic-inference flags (`--enable-deterministic-inference`,
`--attention-backend ...`) are ordinary arm args.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from servediff.caches import SGLANG
from servediff.engines.base import (
    EngineAdapter,
    EngineInfo,
    EngineOptions,
    Generated,
    Scored,
    has_module,
)
from servediff.engines.completions import tokenize
from servediff.engines.rows import Position, judge, shape
from servediff.engines.transport import EngineClient
from servediff.errors import EngineRequestError


def _find(data: Any, key: str) -> Any:
    """`key` at the top level or inside `internal_states[0]` (newer SGLang versions)."""
    if isinstance(data, dict):
        if key in data:
            return data[key]
        states = data.get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], dict):
            return states[0].get(key)
    return None


def parse_generate(body: Any, batch: list[list[int]]) -> list[Scored]:
    items = body if isinstance(body, list) else [body]
    if len(items) != len(batch):
        raise EngineRequestError(f"asked {len(batch)} prompts, got {len(items)} results")
    out = []
    with shape("/generate", body):
        for item, ids in zip(items, batch, strict=True):
            meta = item["meta_info"]
            entries = meta["input_token_logprobs"]
            if not isinstance(entries, list):
                raise EngineRequestError(
                    "/generate answered without meta_info.input_token_logprobs")
            # [logprob, token_id, text] per prompt token; the first logprob is null
            positions = [Position(int(e[1]), None if e[0] is None else float(e[0]))
                         for e in entries[1:]]
            server = meta.get("prompt_tokens")
            out.append(judge(ids, positions,
                             first="logprob" if entries and entries[0][0] is not None
                             else "null",
                             server_tokens=None if server is None else int(server)))
    return out


class SglangOptions(EngineOptions):
    # SGLang's radix (prefix) cache; off unless an arm measures with it.
    # None (cost loads): no flag, as the arm's own args leave it.
    prefix_cache: bool | None = False


class SglangAdapter(EngineAdapter):
    name = "sglang"
    # not measured here (SGLang never ran on our machines): vLLM's, as a guess
    typical_start_s = 90.0
    capabilities: ClassVar[frozenset[str]] = frozenset(
        {"score", "generate", "capacity", "version", "reload"}
    )
    default_command: ClassVar[list[str]] = [
        sys.executable, "-m", "sglang.launch_server", "--model-path", "{model}",
        "--host", "{host}", "--port", "{port}",
    ]
    options_model = SglangOptions
    caches = SGLANG
    cache_option = "prefix_cache"
    cache_states: ClassVar[dict[bool | None, str]] = {
        None: "radix cache as the arm's args leave it (cost load; SGLang's default is on)",
        True: "radix cache ON (a cache arm)",
        False: "radix cache off: --disable-radix-cache",
    }
    caveat = ("never run against a real SGLang (not installable here); tested against "
              "documented response shapes only")

    @classmethod
    def locate(cls) -> str | None:
        return "this Python environment" if has_module("sglang") else None

    def option_args(self, options: EngineOptions) -> list[str]:
        assert isinstance(options, SglangOptions)
        return ["--disable-radix-cache"] if options.prefix_cache is False else []

    def info(self, client: EngineClient) -> EngineInfo:
        raw: dict[str, Any] = client.get_json("/get_server_info")
        total = _find(raw, "max_total_num_tokens")
        return EngineInfo(
            version={"engine": "sglang", "sglang": raw.get("version")},
            bos_token_id=None,
            max_model_len=_find(raw, "context_length"),
            capacity={"kv_tokens": total, "max_running_requests":
                      _find(raw, "max_running_requests")},
            raw=raw,
        )

    def tokenize(self, client: EngineClient, text: str, options: EngineOptions) -> list[int]:
        return tokenize(client, text, model=None)

    def score(self, client: EngineClient, batch: list[list[int]],
              options: EngineOptions) -> list[Scored]:
        payload = {
            "input_ids": batch[0] if len(batch) == 1 else batch,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        return parse_generate(client.post_json("/generate", payload), batch)

    def generate(self, client: EngineClient, ids: list[int], max_tokens: int,
                 options: EngineOptions) -> Generated:
        body = client.post_json("/generate", {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": max_tokens, "min_new_tokens": max_tokens,
                                "temperature": 0.0, "ignore_eos": True},
            "return_logprob": True,
            "logprob_start_len": len(ids),
        })
        with shape("/generate", body):
            meta = body["meta_info"]
            steps = meta["output_token_logprobs"]
            return Generated(token_ids=[int(s[1]) for s in steps],
                             logprobs=[float(s[0]) for s in steps],
                             text=str(body.get("text", "")),
                             prompt_tokens=meta.get("prompt_tokens"),
                             cached_tokens=meta.get("cached_tokens"))
