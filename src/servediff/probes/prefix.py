"""The prefix probe: one long shared system prefix, then different questions.

The requests go one after another; an engine that reuses the prefix reports
cached prompt tokens on every request after the first and answers them
sooner. TTFT here is the latency of a one-token request, as in the speed probe.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from servediff.engines.base import EngineAdapter, EngineOptions
from servediff.engines.transport import EngineClient
from servediff.errors import EngineError
from servediff.evidence import PrefixSample


def measure(adapter: EngineAdapter, client: EngineClient, options: EngineOptions,
            prefix: list[int], questions: list[list[int]],
            advanced: Callable[[int], None]) -> list[PrefixSample]:
    samples = []
    for index, question in enumerate(questions):
        ids = prefix + question
        t0 = time.monotonic()
        try:
            out = adapter.generate(client, ids, 1, options)
        except EngineError as exc:
            samples.append(PrefixSample(index=index, prompt_tokens=len(ids), status="error",
                                        error=str(exc)))
        else:
            samples.append(PrefixSample(index=index, prompt_tokens=len(ids),
                                        ttft_s=round(time.monotonic() - t0, 6),
                                        cached_tokens=out.cached_tokens))
        advanced(len(samples))
    return samples
