"""Payloads and parsing for vLLM-style `/v1/completions` prompt logprobs.

Shared by every engine that speaks this dialect (the embedded transformers
server and vLLM). `prompt_logprobs` is a list with one entry per prompt token:
entry 0 is null, entry i maps token-id strings to `{"logprob": ...}` and
always contains the prompt token itself.
"""

from __future__ import annotations

from typing import Any

from servediff.engines.base import Scored
from servediff.errors import EngineRequestError


def score_payload(model: str, batch: list[list[int]]) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": batch[0] if len(batch) == 1 else batch,
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": 1,
    }


def parse_scores(body: Any, batch: list[list[int]]) -> list[Scored]:
    try:
        choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
    except (KeyError, TypeError, AttributeError):
        raise EngineRequestError(
            f"completions response has no choices: {str(body)[:200]}"
        ) from None
    if len(choices) != len(batch):
        raise EngineRequestError(f"asked {len(batch)} prompts, got {len(choices)} choices")
    usage = body.get("usage") or {}
    per_prompt = usage.get("prompt_tokens_per_prompt")
    out = []
    for i, (choice, ids) in enumerate(zip(choices, batch, strict=True)):
        entries = choice.get("prompt_logprobs")
        if not isinstance(entries, list):
            raise EngineRequestError("response has no prompt_logprobs; engine cannot score")
        logprobs: list[float] = []
        ranks: list[int] = []
        invalid = None
        for pos, entry in enumerate(entries[1:], start=1):
            if pos >= len(ids):
                break
            hit = entry.get(str(ids[pos])) if isinstance(entry, dict) else None
            if hit is None:
                invalid = f"position {pos}: prompt token {ids[pos]} missing from prompt_logprobs"
                break
            logprobs.append(float(hit["logprob"]))
            if "rank" in hit and hit["rank"] is not None:
                ranks.append(int(hit["rank"]))
        server_tokens: int | None = None
        if per_prompt is not None:
            server_tokens = int(per_prompt[i])
        elif len(batch) == 1 and "prompt_tokens" in usage:
            server_tokens = int(usage["prompt_tokens"])
        if invalid is None and entries and entries[0] is not None:
            invalid = "prompt_logprobs[0] is not null"
        if invalid is None and len(logprobs) != len(ids) - 1:
            invalid = (f"{len(logprobs)} prompt logprobs for {len(ids)} ids "
                       f"(expected {len(ids) - 1})")
        if invalid is None and server_tokens is not None and server_tokens != len(ids):
            invalid = f"server counted {server_tokens} prompt tokens, {len(ids)} were sent"
        out.append(Scored(
            token_logprobs=logprobs,
            ranks=ranks if len(ranks) == len(logprobs) else None,
            server_prompt_tokens=server_tokens,
            invalid=invalid,
        ))
    return out
