"""The concurrency probe: identical requests at concurrency 1 and above, per length.

For every kind of request (teacher-forced scoring, greedy generation) and
every prompt length, the same request is sent `requests` times at each
level: one at a time first (the negative control, which must give one
result), then with `level` requests in flight at once, so an engine that
batches them computes each next to different neighbours.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from servediff.engines.base import EngineAdapter, EngineOptions
from servediff.engines.transport import EngineClient
from servediff.evidence import Group, RequestKind, Response
from servediff.plan import ConcurrencyProbe
from servediff.probes import requests


def prompt_of_length(stream: list[int], head: list[int], length: int) -> list[int]:
    """`head` then the token stream (repeated if short), `length` ids in all."""
    body = length - len(head)
    reps = body // max(len(stream), 1) + 1
    return head + (stream * reps)[:body]


def measure(adapter: EngineAdapter, client: EngineClient, options: EngineOptions,
            prompts: dict[int, list[int]], spec: ConcurrencyProbe, kinds: list[RequestKind],
            advanced: Callable[[int], None]) -> list[Group]:
    groups = []
    for kind in kinds:
        for length, ids in prompts.items():
            def send(i: int, ids: list[int] = ids, kind: RequestKind = kind) -> Response:
                if kind == "score":
                    return requests.scoring(adapter, client, ids, options, i)
                return requests.generation(adapter, client, ids, spec.max_tokens, options, i)

            for level in spec.levels:
                with ThreadPoolExecutor(max_workers=level) as pool:
                    responses = list(pool.map(send, range(spec.requests)))
                groups.append(Group(kind=kind, length=length, level=level,
                                    max_tokens=spec.max_tokens if kind == "generate" else 0,
                                    prompt_sha256=requests.prompt_sha256(ids),
                                    responses=responses))
                advanced(len(groups))
    return groups
