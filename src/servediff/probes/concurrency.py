"""The concurrency probe: identical requests at concurrency 1 and above, per length.

For every prompt length, the same greedy generation request is sent
`requests` times at each level: one at a time first (the negative control,
which must give one result), then with `level` requests in flight at once, so
an engine that batches them computes each next to different neighbours. Every
response keeps its token ids and logprobs and a hash of both; analysis
compares hashes, never text by eye.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from servediff.engines.base import EngineAdapter, EngineOptions
from servediff.engines.transport import EngineClient
from servediff.errors import EngineError
from servediff.evidence import Group, Response
from servediff.plan import ConcurrencyProbe


def response_hash(token_ids: list[int], logprobs: list[float]) -> str:
    body = json.dumps({"ids": token_ids, "logprobs": logprobs})
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def prompt_of_length(stream: list[int], head: list[int], length: int) -> list[int]:
    """`head` then the token stream (repeated if short), `length` ids in all."""
    body = length - len(head)
    reps = body // max(len(stream), 1) + 1
    return head + (stream * reps)[:body]


def one(adapter: EngineAdapter, client: EngineClient, ids: list[int], max_tokens: int,
         options: EngineOptions, index: int) -> Response:
    t0 = time.monotonic()
    try:
        out = adapter.generate(client, ids, max_tokens, options)
    except EngineError as exc:
        return Response(index=index, status="error", error=str(exc),
                        seconds=round(time.monotonic() - t0, 6))
    return Response(
        index=index, status="ok", token_ids=out.token_ids, logprobs=out.logprobs,
        text=out.text, hash=response_hash(out.token_ids, out.logprobs),
        prompt_tokens=out.prompt_tokens, cached_tokens=out.cached_tokens,
        seconds=round(time.monotonic() - t0, 6),
    )


def measure(adapter: EngineAdapter, client: EngineClient, options: EngineOptions,
            prompts: dict[int, list[int]], spec: ConcurrencyProbe,
            advanced: Callable[[int], None]) -> list[Group]:
    groups = []
    for length, ids in prompts.items():
        digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
        for level in spec.levels:
            with ThreadPoolExecutor(max_workers=level) as pool:
                responses = list(pool.map(
                    lambda i, ids=ids: one(adapter, client, ids, spec.max_tokens, options, i),
                    range(spec.requests),
                ))
            groups.append(Group(length=length, level=level, max_tokens=spec.max_tokens,
                                prompt_sha256=digest, responses=responses))
            advanced(len(groups))
    return groups


def generations(adapter: EngineAdapter, client: EngineClient, options: EngineOptions,
                prompts: dict[str, list[int]], max_tokens: int, repeats: int,
                advanced: Callable[[int], None]) -> list[Group]:
    """The generate probe: each prompt continued greedily `repeats` times, one at a time."""
    groups = []
    for tag, ids in prompts.items():
        responses = [one(adapter, client, ids, max_tokens, options, i) for i in range(repeats)]
        groups.append(Group(tag=tag, length=len(ids), level=1, max_tokens=max_tokens,
                            prompt_sha256=hashlib.sha256(json.dumps(ids).encode()).hexdigest(),
                            responses=responses))
        advanced(len(groups))
    return groups
