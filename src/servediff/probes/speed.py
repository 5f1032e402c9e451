"""The speed probe: TTFT, prefill tok/s and decode tok/s, replicated.

A replicate at prompt length L is two requests, each on a prompt of its own
(a different rotation of the corpus token stream, so no prefix cache can
serve it): one for a single token, whose latency is the TTFT, and one for
`max_tokens`, whose extra latency over the TTFT is the decode time. Streaming
is not needed, so every engine is measured the same way. The first `warmup`
replicates of a load are kept but marked, and analysis drops them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from servediff.engines.base import EngineAdapter, EngineOptions, Generated
from servediff.engines.transport import EngineClient
from servediff.errors import EngineError
from servediff.evidence import SpeedSample
from servediff.plan import SpeedProbe


def rotated_prompt(stream: list[int], head: list[int], length: int, n: int) -> list[int]:
    """Prompt number `n` of `length` ids: `head`, then the stream from a shifted start."""
    if not stream:
        raise ValueError("empty token stream")
    shift = (n * 7919) % len(stream)
    body = length - len(head)
    turned = stream[shift:] + stream[:shift]
    return head + (turned * (body // len(turned) + 1))[:body]


def _timed(adapter: EngineAdapter, client: EngineClient, ids: list[int], max_tokens: int,
           options: EngineOptions) -> tuple[Generated, float]:
    t0 = time.monotonic()
    out = adapter.generate(client, ids, max_tokens, options)
    return out, time.monotonic() - t0


def measure(adapter: EngineAdapter, client: EngineClient, options: EngineOptions,
            stream: list[int], head: list[int], lengths: list[int], spec: SpeedProbe,
            advanced: Callable[[int], None]) -> list[SpeedSample]:
    samples: list[SpeedSample] = []
    n = 0
    for length in lengths:
        for replicate in range(spec.warmup + spec.replicates):
            base: dict[str, Any] = dict(replicate=replicate, warmup=replicate < spec.warmup,
                                        prompt_tokens=length)
            try:
                first, ttft = _timed(adapter, client, rotated_prompt(stream, head, length, n),
                                     1, options)
                full, total = _timed(adapter, client,
                                     rotated_prompt(stream, head, length, n + 1),
                                     spec.max_tokens, options)
            except EngineError as exc:
                samples.append(SpeedSample(**base, status="error", error=str(exc)))
            else:
                generated = len(full.token_ids)
                decode = total - ttft
                samples.append(SpeedSample(
                    **base, achieved_prompt_tokens=first.prompt_tokens,
                    ttft_s=round(ttft, 6), total_s=round(total, 6), generated=generated,
                    prefill_tok_s=round(length / ttft, 3),
                    decode_tok_s=round((generated - 1) / decode, 3)
                    if decode > 0 and generated > 1 else None))
            n += 2
            advanced(len(samples))
    return samples
