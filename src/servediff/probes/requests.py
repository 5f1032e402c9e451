"""One request of a drift probe, timed and hashed into a `Response`.

Both drift probes that send identical requests (concurrency, generate) go
through here, so a greedy generation and a scoring request are recorded,
hashed and failed the same way. The hash covers token ids and logprobs:
analysis compares hashes, never text by eye.
"""

from __future__ import annotations

import hashlib
import json
import time

from servediff.engines.base import EngineAdapter, EngineOptions
from servediff.engines.transport import EngineClient
from servediff.errors import EngineError, EngineRequestError
from servediff.evidence import Response


def response_hash(token_ids: list[int], logprobs: list[float]) -> str:
    body = json.dumps({"ids": token_ids, "logprobs": logprobs})
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def prompt_sha256(ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()


def frozen(exc: EngineError) -> None:
    """A request the engine neither answered nor worked on for a whole stall window ends
    the launch (it is stopped and the load started again for the cells it left), instead of
    leaving one error row after another, each a timeout long."""
    if isinstance(exc, EngineRequestError) and exc.stalled:
        raise EngineError(f"engine hung: {exc}") from None


def generation(adapter: EngineAdapter, client: EngineClient, ids: list[int], max_tokens: int,
               options: EngineOptions, index: int) -> Response:
    """A greedy generation after `ids`: the generated ids and their logprobs."""
    t0 = time.monotonic()
    try:
        out = adapter.generate(client, ids, max_tokens, options)
    except EngineError as exc:
        frozen(exc)
        return Response(index=index, status="error", error=str(exc),
                        seconds=round(time.monotonic() - t0, 6))
    return Response(
        index=index, status="ok", token_ids=out.token_ids, logprobs=out.logprobs,
        text=out.text, hash=response_hash(out.token_ids, out.logprobs),
        prompt_tokens=out.prompt_tokens, cached_tokens=out.cached_tokens,
        seconds=round(time.monotonic() - t0, 6),
    )


def scoring(adapter: EngineAdapter, client: EngineClient, ids: list[int],
            options: EngineOptions, index: int) -> Response:
    """A teacher-forced score of `ids`: its prompt logprobs are the response."""
    t0 = time.monotonic()
    try:
        (out,) = adapter.score(client, [ids], options)
    except EngineError as exc:
        frozen(exc)
        return Response(index=index, status="error", error=str(exc),
                        seconds=round(time.monotonic() - t0, 6))
    seconds = round(time.monotonic() - t0, 6)
    if out.invalid is not None:
        return Response(index=index, status="error", error=f"invalid row: {out.invalid}",
                        logprobs=out.token_logprobs, seconds=seconds)
    return Response(index=index, status="ok", logprobs=out.token_logprobs,
                    hash=response_hash([], out.token_logprobs),
                    prompt_tokens=out.server_prompt_tokens, seconds=seconds)
