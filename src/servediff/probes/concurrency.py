"""The concurrency probe: identical requests at concurrency 1 and above, per length.

For every kind of request (teacher-forced scoring, greedy generation) and
every prompt length, the same request is sent `requests` times at each
level: one at a time first (the negative control, which must give one
result), then with `level` requests in flight at once, so an engine that
batches them computes each next to different neighbours. Lengths whose
prompt and generated tokens do not fit the context, and scoring requests on
an engine where one score is one request per position, are skipped with the
reason in the cell.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Annotated

from pydantic import Field, field_validator

from servediff.evidence import Group, RequestKind, Response, Skipped
from servediff.plan import Plan
from servediff.probes import requests
from servediff.probes.base import Probe, Work
from servediff.probes.settings import (
    Cut,
    PlanShape,
    ProbeSettings,
    check_loads,
    distinct_sorted,
    tokens_list,
)
from servediff.schedule import CellSpec

if TYPE_CHECKING:
    from servediff.probes.context import ProbeContext


REQUEST_KINDS: list[RequestKind] = ["score", "generate"]


class ConcurrencySettings(ProbeSettings):
    """Identical requests at concurrency 1 (the control) and above, per prompt length.

    Short prompts hide batch-composition drift and one request at a time hides it
    completely: the defaults are prompts of a few hundred tokens and more, levels
    from 1 to 8, and 8 identical requests per cell.
    """

    section = "concurrency"
    phase = "drift"

    enabled: bool = Field(default=True, description="false: the probe does not run")
    lengths: list[Annotated[int, Field(ge=2)]] = Field(
        default_factory=lambda: [256, 768, 1536],
        description="prompt tokens (skipped where they exceed the context)")
    levels: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default_factory=lambda: [1, 2, 4, 8],
        description="requests in flight; level 1 is the control")
    requests: Annotated[int, Field(ge=2, le=256)] = Field(
        default=8, description="identical requests per kind, length and level")
    max_tokens: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=16, description="tokens of each greedy generation")
    kinds: list[RequestKind] = Field(
        default_factory=lambda: list(REQUEST_KINDS),
        description="teacher-forced scoring requests and greedy generations")
    loads: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, examples=[[2]], description="the drift loads that run the grid (default: "
        "every one)")

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, kinds: list[RequestKind]) -> list[RequestKind]:
        if not kinds:
            raise ValueError("needs at least one of \"score\", \"generate\"")
        return sorted(set(kinds), key=REQUEST_KINDS.index)

    @field_validator("levels")
    @classmethod
    def _control(cls, levels: list[int]) -> list[int]:
        if 1 not in levels:
            raise ValueError("must include 1: concurrency 1 is the negative control")
        if len(levels) < 2:
            raise ValueError("needs at least one level above 1")
        return sorted(set(levels))

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, lengths: list[int]) -> list[int]:
        return distinct_sorted(lengths, "needs at least one prompt length")

    def cuts(self, context: int | None) -> list[Cut]:
        """The longest prompts halved while they stay longer than the next (the levels,
        the control and the request count stay), then, among the last cuts made, the
        longest length dropped."""
        made: list[Cut] = []
        lengths = self.lengths
        if len(lengths) > 1 and lengths[-1] // 2 > lengths[-2]:
            shorter = [*lengths[:-1], lengths[-1] // 2]
            made.append(Cut(30, f"concurrency: prompts of {tokens_list(shorter)} tokens, not "
                                f"{tokens_list(lengths)}", {"lengths": shorter}))
            lengths = shorter
        if len(lengths) > 1:
            made.append(Cut(100, f"concurrency: prompts of {tokens_list(lengths[:-1])} tokens "
                                 f"only, not {tokens_list(lengths)}", {"lengths": lengths[:-1]}))
        return made

    def check(self, plan: PlanShape) -> None:
        check_loads(plan, self.section, self.loads)


def prompt_of_length(stream: list[int], head: list[int], length: int) -> list[int]:
    """`head` then the token stream (repeated if short), `length` ids in all."""
    body = length - len(head)
    reps = body // max(len(stream), 1) + 1
    return head + (stream * reps)[:body]


class ConcurrencyProbe(Probe[ConcurrencySettings]):
    """Identical requests alone and in flight together, per prompt length and kind."""

    settings = ConcurrencySettings
    names = ("concurrency",)
    description = "identical requests alone and together: batch-composition drift"
    title = "identical requests at concurrency >= 2 (batch-composition drift)"

    def protocol(self, spec: ConcurrencySettings) -> str | None:
        return (f"concurrency {spec.kinds} at lengths {spec.lengths} x levels "
                f"{spec.levels}, {spec.requests} identical requests")


    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        spec = self.spec(plan)
        return [CellSpec(arm, load, "concurrency", 0)] if spec.enabled and (
            spec.loads is None or load in spec.loads) else []

    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        spec = self.spec(plan)
        per_length = len(spec.levels) * spec.requests
        new = spec.max_tokens if "generate" in spec.kinds else 0
        return Work(requests=len(spec.kinds) * len(spec.lengths) * per_length,
                    prompt_tokens=len(spec.kinds) * per_length * sum(spec.lengths),
                    new_tokens=new * len(spec.lengths) * per_length)

    def measure(self, ctx: ProbeContext, cell: CellSpec) -> None:
        spec = self.spec(ctx.plan)
        adapter, client, options = ctx.adapter, ctx.engine, ctx.options
        head, _ = ctx.scoring_prefix
        lengths, skipped = ctx.fits(spec.lengths, spec.max_tokens)
        prompts = {n: prompt_of_length(ctx.stream, head, n) for n in lengths}
        kinds = list(spec.kinds)
        if "score" in kinds and adapter.concurrent_scoring_gap:
            kinds.remove("score")
            skipped.append(Skipped(kind="score", reason=adapter.concurrent_scoring_gap))
        obs = ctx.observer
        obs.cell_starting(cell.name, len(prompts) * len(spec.levels) * len(kinds))
        out = ctx.cell(cell)
        t0 = time.monotonic()
        for kind in kinds:
            for length, ids in prompts.items():
                def send(i: int, ids: list[int] = ids, kind: RequestKind = kind) -> Response:
                    if kind == "score":
                        return requests.scoring(adapter, client, ids, options, i)
                    return requests.generation(adapter, client, ids, spec.max_tokens,
                                               options, i)

                for level in spec.levels:
                    with ThreadPoolExecutor(max_workers=level) as pool:
                        responses = list(pool.map(send, range(spec.requests)))
                    out.groups.append(Group(
                        kind=kind, length=length, level=level,
                        max_tokens=spec.max_tokens if kind == "generate" else 0,
                        prompt_sha256=requests.prompt_sha256(ids), responses=responses))
                    obs.cell_advanced(len(out.groups))
        out.prompts, out.skipped = prompts, skipped
        ctx.finish(out, time.monotonic() - t0)
