"""The OpenAI-style `/v1/completions` dialect, and the adapter base for engines that speak it.

The embedded transformers server, vLLM and external OpenAI-compatible
endpoints score, generate and tokenize the same way; they differ only in
the model name they send and the scoring form they use, which
`CompletionsAdapter` subclasses say. Two scoring forms:

- `prompt_logprobs`: a list with one entry per prompt token; entry 0 is null,
  entry i maps token-id strings to `{"logprob": ..., "rank": ...}` and
  contains the prompt token itself (vLLM's form).
- `echo` (OpenAI's legacy form): `echo: true, logprobs: 1, max_tokens: 0`;
  `choices[i].logprobs.token_logprobs` has one value per prompt token, the
  first null, and `tokens` names them (`token_id:N` when the server honours
  `return_tokens_as_token_ids`; otherwise the tokens cannot be checked
  against the ids sent, only counted).
"""

from __future__ import annotations

from typing import Any, Literal

from servediff.engines.base import EngineAdapter, EngineOptions, Generated, Scored, Streamed
from servediff.engines.rows import Position, judge, shape
from servediff.engines.transport import EngineClient
from servediff.errors import EngineRequestError

ScoreForm = Literal["prompt_logprobs", "echo"]


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
    with shape("/tokenize", body):
        return [int(t) for t in body["tokens"]]


def score_payload(model: str | None, batch: list[list[int]], echo: bool = False
                  ) -> dict[str, Any]:
    payload: dict[str, Any] = {"prompt": batch[0] if len(batch) == 1 else batch,
                               "temperature": 0.0}
    if model is not None:
        payload["model"] = model
    if echo:
        payload.update({"echo": True, "logprobs": 1, "max_tokens": 0,
                        "return_tokens_as_token_ids": True})
    else:
        payload.update({"prompt_logprobs": 1, "max_tokens": 1})
    return payload


def token_id(token: object) -> int | None:
    """N from `token_id:N`; None for a token given as text."""
    text = str(token)
    if text.startswith("token_id:") and text[9:].lstrip("-").isdigit():
        return int(text[9:])
    return None


First = Literal["null", "logprob"]


def _positions(choice: dict[str, Any], ids: list[int], echo: bool
               ) -> tuple[First, list[Position], list[int]]:
    """(first entry: "null"/"logprob", positions 1.., ranks) of one choice."""
    if echo:
        logprobs = choice["logprobs"]
        values = logprobs["token_logprobs"]
        tokens = logprobs.get("tokens") or [None] * len(values)
        echoed = [Position(token_id(t), None if v is None else float(v))
                  for t, v in zip(tokens[1:], values[1:], strict=True)]
        first: First = "logprob" if values and values[0] is not None else "null"
        return first, echoed, []
    entries = choice["prompt_logprobs"]
    if not isinstance(entries, list):
        raise EngineRequestError("response has no prompt_logprobs; engine cannot score")
    positions: list[Position] = []
    ranks: list[int] = []
    for pos, entry in enumerate(entries[1:], start=1):
        # The entry holds the prompt token itself (and the top tokens): look it up by the
        # id that was sent at this position; beyond the ids sent there is nothing to find.
        want = ids[pos] if pos < len(ids) else None
        hit = entry.get(str(want)) if isinstance(entry, dict) and want is not None else None
        positions.append(Position(None, None if hit is None else float(hit["logprob"])))
        if hit is not None and hit.get("rank") is not None:
            ranks.append(int(hit["rank"]))
    first = "logprob" if entries and entries[0] is not None else "null"
    return first, positions, ranks


def parse_scores(body: Any, batch: list[list[int]], echo: bool = False) -> list[Scored]:
    with shape("/v1/completions", body):
        choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
        if len(choices) != len(batch):
            raise EngineRequestError(f"asked {len(batch)} prompts, got {len(choices)} choices")
        usage = body.get("usage") or {}
        per_prompt = usage.get("prompt_tokens_per_prompt")
        # With several prompts and no per-prompt count, only the total can be checked.
        total = usage.get("prompt_tokens")
        sent = sum(len(ids) for ids in batch)
        extra = (f"server counted {total} prompt tokens for the batch, {sent} were sent"
                 if per_prompt is None and len(batch) > 1 and total is not None
                 and int(total) != sent else None)
        out = []
        for i, (choice, ids) in enumerate(zip(choices, batch, strict=True)):
            first, positions, ranks = _positions(choice, ids, echo)
            server = (int(per_prompt[i]) if per_prompt is not None else
                      int(total) if len(batch) == 1 and total is not None else None)
            out.append(judge(ids, positions, first=first, server_tokens=server,
                             ranks=ranks or None, extra=extra))
        return out


def generate_payload(model: str | None, ids: list[int], max_tokens: int) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "prompt": ids, "max_tokens": max_tokens, "min_tokens": max_tokens,
        "temperature": 0.0, "seed": 0, "logprobs": 1, "return_tokens_as_token_ids": True,
    }
    if model is not None:
        payload["model"] = model
    return payload


def parse_generated(body: Any) -> Generated:
    with shape("/v1/completions", body):
        choice = body["choices"][0]
        tokens = choice["logprobs"]["tokens"]
        values = choice["logprobs"]["token_logprobs"]
        ids = [token_id(t) for t in tokens]
        if any(i is None for i in ids):
            raise EngineRequestError(
                "the completion names its tokens as text, not `token_id:N`: the endpoint "
                "ignores return_tokens_as_token_ids, so generations cannot be compared by id")
        usage = body.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return Generated(token_ids=[i for i in ids if i is not None],
                         logprobs=[float(v) for v in values],
                         text=str(choice.get("text", "")),
                         prompt_tokens=usage.get("prompt_tokens"),
                         cached_tokens=details.get("cached_tokens"))


def stream_payload(model: str | None, ids: list[int], max_tokens: int) -> dict[str, Any]:
    """A streamed greedy generation of exactly `max_tokens` (as `vllm bench serve` sends
    it: no logprobs, the end-of-sequence token ignored), with the usage counted at the end."""
    payload: dict[str, Any] = {
        "prompt": ids, "max_tokens": max_tokens, "min_tokens": max_tokens,
        "ignore_eos": True, "temperature": 0.0, "seed": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model is not None:
        payload["model"] = model
    return payload


def parse_stream(events: list[tuple[float, Any]], total_s: float) -> Streamed:
    """The arrival times of the chunks that carry text, and the usage of the last event."""
    with shape("/v1/completions (stream)", events):
        chunks = [t for t, body in events
                  if any(c.get("text") for c in body.get("choices") or [])]
        usage: dict[str, Any] = next((body["usage"] for _, body in reversed(events)
                                      if body.get("usage")), {})
    if not chunks:
        raise EngineRequestError("the streamed completion carried no text")
    return Streamed(chunk_s=chunks, total_s=total_s,
                    completion_tokens=int(usage.get("completion_tokens") or len(chunks)),
                    prompt_tokens=usage.get("prompt_tokens"))


class CompletionsAdapter(EngineAdapter):
    """An engine that speaks `/v1/completions`: subclasses say how it is launched, which
    model name to send and which scoring form to use."""

    served: str | None = None

    def served_model(self, options: EngineOptions) -> str | None:
        """The model name sent with every request (None: none)."""
        return self.served

    def score_form(self, options: EngineOptions) -> ScoreForm:
        form: ScoreForm = getattr(options, "score_form", "prompt_logprobs")
        return form

    def tokenize(self, client: EngineClient, text: str, options: EngineOptions) -> list[int]:
        return tokenize(client, text, self.served_model(options))

    def score(self, client: EngineClient, batch: list[list[int]],
              options: EngineOptions) -> list[Scored]:
        echo = self.score_form(options) == "echo"
        body = client.post_json("/v1/completions",
                                score_payload(self.served_model(options), batch, echo=echo))
        return parse_scores(body, batch, echo=echo)

    def generate(self, client: EngineClient, ids: list[int], max_tokens: int,
                 options: EngineOptions) -> Generated:
        body = client.post_json("/v1/completions",
                                generate_payload(self.served_model(options), ids, max_tokens))
        return parse_generated(body)

    def stream(self, client: EngineClient, ids: list[int], max_tokens: int,
               options: EngineOptions) -> Streamed:
        events, total = client.post_stream(
            "/v1/completions", stream_payload(self.served_model(options), ids, max_tokens))
        return parse_stream(events, total)
