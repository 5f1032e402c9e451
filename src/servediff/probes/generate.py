"""The generate probe: corpus prompts continued greedily, repeated one at a time.

Each prompt's `repeats` generations are sent one after another (nothing else
in flight), so what differs between them is the load's own state, not batch
neighbours. Analysis compares them within the load, across loads and arms.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from servediff.evidence import Group
from servediff.plan import Plan
from servediff.probes import requests
from servediff.probes.base import Probe, Work
from servediff.probes.settings import Cut, ProbeSettings, halved
from servediff.schedule import CellSpec

if TYPE_CHECKING:
    from servediff.probes.context import ProbeContext


class GenerateSettings(ProbeSettings):
    """Greedy continuations of corpus texts, hashed across repeats, loads and arms."""

    section = "generate"
    phase = "drift"

    enabled: bool = Field(default=True, description="false: the probe does not run")
    texts: Annotated[int, Field(ge=1)] = Field(default=8, description="corpus texts continued")
    prompt_tokens: Annotated[int, Field(ge=2)] = Field(
        default=128, description="tokens of each text given as the prompt")
    max_tokens: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=32, description="greedy tokens generated")
    repeats: Annotated[int, Field(ge=1, le=64)] = Field(
        default=2, description="generations of each text in every load")

    def cuts(self, context: int | None) -> list[Cut]:
        """Half the texts, 2 at least: a generation still compares across loads."""
        if (fewer := halved(self.texts, 2)) is None:
            return []
        return [Cut(70, f"generate: {fewer} texts, not {self.texts}", {"texts": fewer})]


class GenerateProbe(Probe[GenerateSettings]):
    """Greedy continuations of corpus texts, hashed and repeated within the load."""

    settings = GenerateSettings
    names = ("generate",)
    description = "greedy continuations, hashed across repeats, loads and arms"
    title = "greedy generation hashed across repeats, loads and arms"

    def protocol(self, spec: GenerateSettings) -> str | None:
        return f"generate {spec.texts} prompts x {spec.repeats} repeats, {spec.max_tokens} tokens"


    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        return [CellSpec(arm, load, "generate", 0)] if self.spec(plan).enabled else []

    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        spec = self.spec(plan)
        prompts = [min(n, spec.prompt_tokens) for n in texts[: spec.texts]]
        return Work(requests=len(prompts) * spec.repeats,
                    prompt_tokens=sum(prompts) * spec.repeats,
                    new_tokens=len(prompts) * spec.repeats * spec.max_tokens)

    def measure(self, ctx: ProbeContext, cell: CellSpec) -> None:
        spec = self.spec(ctx.plan)
        tags = [t.tag for t in ctx.corpus.texts][: spec.texts]
        prompts = {tag: ctx.ids[tag][: spec.prompt_tokens] for tag in tags}
        obs = ctx.observer
        obs.cell_starting(cell.name, len(prompts))
        out = ctx.cell(cell, tags)
        t0 = time.monotonic()
        for tag, ids in prompts.items():
            responses = [requests.generation(ctx.adapter, ctx.engine, ids,
                                             spec.max_tokens, ctx.options, i)
                         for i in range(spec.repeats)]
            out.groups.append(Group(tag=tag, length=len(ids), level=1,
                                    max_tokens=spec.max_tokens,
                                    prompt_sha256=requests.prompt_sha256(ids),
                                    responses=responses))
            obs.cell_advanced(len(out.groups))
        ctx.finish(out, time.monotonic() - t0)
