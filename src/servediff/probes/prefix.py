"""The prefix probe: one long shared system prefix, then different questions.

The requests go one after another; an engine that reuses the prefix reports
cached prompt tokens on every request after the first and answers them
sooner. TTFT here is the latency of a one-token request, as in the speed
probe. The shared prefix starts with a token no other prompt of the load
starts with, so its first request finds nothing cached (prompts.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from servediff.errors import EngineError
from servediff.evidence import PrefixSample
from servediff.plan import Plan
from servediff.probes import prompts
from servediff.probes.base import Probe, Work
from servediff.probes.settings import ProbeSettings
from servediff.schedule import CellSpec

if TYPE_CHECKING:
    from servediff.probes.context import ProbeContext


class PrefixSettings(ProbeSettings):
    """A long shared system prefix, then different questions: is the prefix reused?"""

    section = "prefix"
    phase = "cost"

    enabled: bool = True
    # 0: half the context length, at most 4096 tokens.
    prefix_tokens: Annotated[int, Field(ge=0)] = 0
    question_tokens: Annotated[int, Field(ge=1)] = 32
    requests: Annotated[int, Field(ge=2, le=64)] = 4


def prefix_size(spec: PrefixSettings, context: int | None) -> int:
    """The shared prefix's tokens: as the plan says, else half the context (at most 4,096;
    8,192 assumed where the engine reports none), leaving room for a question."""
    size = spec.prefix_tokens or min(4096, (context or 8192) // 2)
    return min(size, context - spec.question_tokens - 1) if context else size


class PrefixProbe(Probe[PrefixSettings]):
    """A long shared prefix, then different questions, one at a time."""

    settings = PrefixSettings
    names = ("prefix",)
    description = "a shared prefix, then different questions: is it reused?"
    title = "prefix-cache reuse of a long shared system prompt"

    def protocol(self, spec: PrefixSettings) -> str | None:
        return f"prefix reuse over {spec.requests} requests"


    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        return [CellSpec(arm, load, "prefix", 0, "cost")] if self.spec(plan).enabled else []

    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        spec = self.spec(plan)
        size = prefix_size(spec, context)
        # the first request is a warm-up of the prefix; a cache spares the later ones'
        # prefixes, which the estimate does not count on
        return Work(requests=spec.requests + 1,
                    prompt_tokens=(spec.requests + 1) * (size + spec.question_tokens),
                    new_tokens=spec.requests + 1)

    def measure(self, ctx: ProbeContext, cell: CellSpec) -> None:
        spec = self.spec(ctx.plan)
        size = prefix_size(spec, ctx.context_length)
        source = prompts.Prompts(ctx.stream)
        shared = source.unique(size, prompts.PREFIX)
        questions = [source.unique(spec.question_tokens, prompts.PREFIX + 1 + i)
                     for i in range(spec.requests)]
        obs = ctx.observer
        obs.cell_starting(cell.name, spec.requests)
        out = ctx.cell(cell)
        for index, question in enumerate(questions):
            ids = shared + question
            t0 = time.monotonic()
            try:
                got = ctx.adapter.generate(ctx.engine, ids, 1, ctx.options)
            except EngineError as exc:
                out.prefix.append(PrefixSample(index=index, prompt_tokens=len(ids),
                                               status="error", error=str(exc)))
            else:
                out.prefix.append(PrefixSample(index=index, prompt_tokens=len(ids),
                                               ttft_s=round(time.monotonic() - t0, 6),
                                               cached_tokens=got.cached_tokens))
            obs.cell_advanced(len(out.prefix))
        ctx.finish(out)
