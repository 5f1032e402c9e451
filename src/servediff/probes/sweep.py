"""The sweep probe: prompts up to the context length and past it; what survived.

`points` lays out the map: doubling lengths up to the context the engine
reports, the context itself (one token left for the answer), one length past
it, and each at every level (that many prompts sent at once). `send` runs one
point and classifies it:

    ok       every request answered within `request_timeout_s`
    slow     every request answered, at least one after `request_timeout_s`,
             the engine working all the while
    error    an error response (status and message kept)
    hang     no answer, and the engine did no work for a whole stall window
             (its health check may still answer: that is recorded)
    timeout  no answer within `give_up_s` although the engine kept working
    death    the process exited

The runner restarts the engine after a hang, a timeout or a death and goes on
with the next point.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from servediff.engines.base import EngineAdapter, EngineOptions, Generated
from servediff.engines.transport import EngineClient
from servediff.errors import EngineRequestError
from servediff.evidence import SweepPoint
from servediff.plan import SweepProbe
from servediff.probes.speed import rotated_prompt


def points(spec: SweepProbe, context: int | None) -> list[tuple[int, int]]:
    """(length, level) in the order they are sent: single prompts first, short to long."""
    if spec.lengths:
        lengths = sorted(set(spec.lengths))
    elif context is None:
        return []
    else:
        lengths = []
        n = spec.start
        while n < context - 1:
            lengths.append(n)
            n *= 2
        lengths += [context - 1, context + max(context // 4, 16)]
    fits = [n for n in lengths if context is None or n < context]
    return [(n, 1) for n in lengths] + [(n, c) for c in spec.levels if c > 1 for n in fits]


@dataclass(frozen=True)
class Liveness:
    """How the sweep asks about the server: has it exited, does health answer."""

    exited: Callable[[], tuple[int | None, str | None] | None]
    healthy: Callable[[], bool]
    log_tail: Callable[[], str]


def send(adapter: EngineAdapter, client: EngineClient, options: EngineOptions,
         stream: list[int], head: list[int], length: int, level: int, spec: SweepProbe,
         live: Liveness, launch: int, watched: bool = True) -> SweepPoint:
    prompts = [rotated_prompt(stream, head, length, 1000 + i) for i in range(level)]
    results: list[Generated | EngineRequestError] = []

    def one(ids: list[int]) -> tuple[Generated | EngineRequestError, float]:
        r0 = time.monotonic()
        try:
            out: Generated | EngineRequestError = adapter.generate(client, ids, 1, options)
        except EngineRequestError as exc:
            out = exc
        return out, round(time.monotonic() - r0, 3)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=level) as pool:
        timed = list(pool.map(one, prompts))
    seconds = round(time.monotonic() - t0, 3)
    results = [r for r, _ in timed]
    achieved = [r.prompt_tokens if isinstance(r, Generated) else None for r in results]
    errors = [r for r in results if isinstance(r, EngineRequestError)]
    base: dict[str, Any] = dict(length=length, level=level, seconds=seconds, launch=launch,
                                achieved_prompt_tokens=achieved,
                                request_seconds=[s for _, s in timed])
    if not errors:
        ok = all(a is None or abs(a - length) <= spec.tolerance * length for a in achieved)
        slow = any(s > spec.request_timeout_s for _, s in timed)
        return SweepPoint(**base, outcome="slow" if slow else "ok",
                          achieved_ok=ok if any(a is not None for a in achieved) else None)
    first = next((e for e in errors if e.status is not None), errors[0])
    ended = live.exited()
    if ended is not None:
        code, sig = ended
        return SweepPoint(**base, outcome="death", error=str(first), returncode=code,
                          signal=sig, log_tail=live.log_tail())
    if any(e.timed_out for e in errors):
        # No watch on the engine (an external endpoint): a timeout is all that is known.
        stalled = any(e.stalled for e in errors) or not watched
        return SweepPoint(**base, outcome="hang" if stalled else "timeout", error=str(first),
                          health_answered=live.healthy(), log_tail=live.log_tail())
    return SweepPoint(**base, outcome="error", http_status=first.status, error=str(first))
