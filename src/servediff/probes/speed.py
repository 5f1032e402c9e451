"""The speed probe: TTFT, prefill tok/s and decode tok/s, replicated.

A replicate at prompt length L is two requests, each on a prompt of its own
(unique from its first token, so no prefix cache can serve it, see
prompts.py): one for a single token, whose latency is the TTFT, and one for
`max_tokens`, whose extra latency over the TTFT is the decode time. Streaming
is not needed, so every engine is measured the same way. The first `warmup`
replicates of a load are kept but marked, and analysis drops them. Lengths
that leave no room for `max_tokens` in the context are skipped, with why.
"""

from __future__ import annotations

import time
from typing import Any

from servediff.engines.base import Generated
from servediff.errors import EngineError
from servediff.evidence import SpeedSample
from servediff.plan import Plan
from servediff.probes import prompts
from servediff.probes.base import Probe
from servediff.schedule import CellSpec
from servediff.session import LoadSession


def _timed(session: LoadSession, ids: list[int], max_tokens: int) -> tuple[Generated, float]:
    t0 = time.monotonic()
    out = session.adapter.generate(session.engine, ids, max_tokens, session.options)
    return out, time.monotonic() - t0


class Speed(Probe):
    names = ("speed",)
    phase = "cost"

    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        return [CellSpec(arm, load, "speed", 0, "cost")] if plan.probes.speed.enabled else []

    def measure(self, session: LoadSession, cell: CellSpec) -> None:
        spec = session.plan.probes.speed
        source = prompts.Prompts(session.stream)
        lengths, skipped = session.fits(spec.prompt_tokens, spec.max_tokens)
        obs = session.room.observer
        obs.cell_starting(cell.name, len(lengths) * (spec.warmup + spec.replicates))
        out = session.cell(cell)
        out.skipped = skipped
        n = prompts.SPEED
        for length in lengths:
            for replicate in range(spec.warmup + spec.replicates):
                base: dict[str, Any] = dict(replicate=replicate, warmup=replicate < spec.warmup,
                                            prompt_tokens=length)
                try:
                    first, ttft = _timed(session, source.unique(length, n), 1)
                    full, total = _timed(session, source.unique(length, n + 1), spec.max_tokens)
                except EngineError as exc:
                    out.speed.append(SpeedSample(**base, status="error", error=str(exc)))
                else:
                    generated = len(full.token_ids)
                    decode = total - ttft
                    out.speed.append(SpeedSample(
                        **base, achieved_prompt_tokens=first.prompt_tokens,
                        ttft_s=round(ttft, 6), total_s=round(total, 6), generated=generated,
                        prefill_tok_s=round(length / ttft, 3),
                        decode_tok_s=round((generated - 1) / decode, 3)
                        if decode > 0 and generated > 1 else None))
                n += 2
                obs.cell_advanced(len(out.speed))
        session.finish(out)
