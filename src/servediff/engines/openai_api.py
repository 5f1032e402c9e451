"""Payloads and parsing for vLLM-style `/v1/completions` prompt logprobs.

Shared by every engine that speaks this dialect (the embedded transformers
server, vLLM, external OpenAI-compatible endpoints). Two forms:

- `prompt_logprobs`: a list with one entry per prompt token; entry 0 is null,
  entry i maps token-id strings to `{"logprob": ...}` and always contains the
  prompt token itself.
- `echo` (OpenAI's legacy form): `echo: true, logprobs: 1, max_tokens: 0`;
  `choices[i].logprobs.token_logprobs` has one value per prompt token, the
  first null.
"""

from __future__ import annotations

from typing import Any

from servediff.engines.base import Generated, Scored
from servediff.engines.transport import EngineClient
from servediff.errors import EngineRequestError


def first_model(client: EngineClient) -> dict[str, Any]:
    """The first entry of `/v1/models`: the served name and its `max_model_len`."""
    models = client.get_json("/v1/models")
    try:
        first: dict[str, Any] = models["data"][0]
    except (KeyError, IndexError, TypeError):
        raise EngineRequestError(f"/v1/models lists no model: {str(models)[:200]}") from None
    return first


def tokenize(client: EngineClient, text: str, model: str | None) -> list[int]:
    """vLLM's `/tokenize`: ids of `text` without special tokens added."""
    payload: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
    if model is not None:
        payload["model"] = model
    body = client.post_json("/tokenize", payload)
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list):
        raise EngineRequestError(f"/tokenize answered without tokens: {str(body)[:200]}")
    return [int(t) for t in tokens]


def score_payload(model: str | None, batch: list[list[int]], echo: bool = False
                  ) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "prompt": batch[0] if len(batch) == 1 else batch,
        "temperature": 0.0,
    }
    if model is not None:
        payload["model"] = model
    if echo:
        payload.update({"echo": True, "logprobs": 1, "max_tokens": 0})
    else:
        payload.update({"prompt_logprobs": 1, "max_tokens": 1})
    return payload


def _echo_entries(choice: dict[str, Any], ids: list[int]) -> list[Any]:
    """Turn the echo form into prompt_logprobs-shaped entries for the shared parser."""
    values = (choice.get("logprobs") or {}).get("token_logprobs")
    if not isinstance(values, list):
        raise EngineRequestError("echo response has no logprobs.token_logprobs")
    entries: list[Any] = [values[0] if values else None]
    for pos, value in enumerate(values[1:len(ids)], start=1):
        entries.append(None if value is None else {str(ids[pos]): {"logprob": value}})
    return entries


def parse_scores(body: Any, batch: list[list[int]], echo: bool = False) -> list[Scored]:
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
    # With several prompts and no per-prompt count, only the total can be checked.
    total_off = (
        per_prompt is None and len(batch) > 1 and "prompt_tokens" in usage
        and int(usage["prompt_tokens"]) != sum(len(ids) for ids in batch)
    )
    out = []
    for i, (choice, ids) in enumerate(zip(choices, batch, strict=True)):
        entries = _echo_entries(choice, ids) if echo else choice.get("prompt_logprobs")
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
        if invalid is None and total_off:
            invalid = (f"server counted {usage['prompt_tokens']} prompt tokens for the batch, "
                       f"{sum(len(x) for x in batch)} were sent")
        out.append(Scored(
            token_logprobs=logprobs,
            ranks=ranks if len(ranks) == len(logprobs) else None,
            server_prompt_tokens=server_tokens,
            invalid=invalid,
        ))
    return out


def generate_payload(model: str | None, ids: list[int], max_tokens: int) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "prompt": ids, "max_tokens": max_tokens, "min_tokens": max_tokens,
        "temperature": 0.0, "seed": 0, "logprobs": 1,
        "return_tokens_as_token_ids": True,
    }
    if model is not None:
        payload["model"] = model
    return payload


def parse_generated(body: Any) -> Generated:
    try:
        choice = body["choices"][0]
        tokens = choice["logprobs"]["tokens"]
        values = choice["logprobs"]["token_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise EngineRequestError(
            f"completion without logprobs.tokens: {str(body)[:200]}"
        ) from None
    ids = [int(str(t).split(":", 1)[1]) for t in tokens]
    usage = body.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return Generated(token_ids=ids, logprobs=[float(v) for v in values],
                     text=str(choice.get("text", "")), prompt_tokens=usage.get("prompt_tokens"),
                     cached_tokens=details.get("cached_tokens"))
