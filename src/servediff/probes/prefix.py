"""The prefix probe: one long shared system prefix, then different questions.

The requests go one after another; an engine that reuses the prefix reports
cached prompt tokens on every request after the first and answers them
sooner. TTFT here is the latency of a one-token request, as in the speed
probe. The shared prefix starts with a token no other prompt of the load
starts with, so its first request finds nothing cached (prompts.py).

Its finding (per arm: the cached tokens and TTFT of the later requests), its
claim (reuse lost, gained or the same against the baseline) and their words
are here too: it reaches the verdict, the factor attribution and What to ship
through the door any probe has (probes/base.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from servediff.bundle import Layout
from servediff.digits import cell as cell_text
from servediff.digits import num3
from servediff.errors import EngineError
from servediff.evidence import Cell, Raw
from servediff.plan import Plan
from servediff.probes import prompts
from servediff.probes.base import Probe, ProbeClaim, ProbeFinding, Work, add_row, rows
from servediff.probes.settings import Cut, ProbeSettings, halved
from servediff.schedule import CellSpec

if TYPE_CHECKING:
    from servediff.probes.context import ProbeContext


class PrefixSettings(ProbeSettings):
    """A long shared system prefix, then different questions: is the prefix reused?"""

    section = "prefix"
    phase = "cost"

    enabled: bool = Field(default=True, description="false: the probe does not run")
    prefix_tokens: Annotated[int, Field(ge=0)] = Field(
        default=0, description="the shared prefix's tokens; 0: half the context, at most 4,096")
    question_tokens: Annotated[int, Field(ge=1)] = Field(
        default=32, description="tokens of each different question after it")
    requests: Annotated[int, Field(ge=2, le=64)] = Field(
        default=4, description="requests, one after another: the first fills the cache")

    def cuts(self, context: int | None) -> list[Cut]:
        """A shared prefix half as long (128 tokens at least): reuse still shows."""
        size = prefix_size(self, context)
        if (shorter := halved(size, 128)) is None:
            return []
        return [Cut(51, f"prefix: a {shorter:,}-token shared prefix, not {size:,}",
                    {"prefix_tokens": shorter})]


class PrefixSample(Raw):
    """One request of the prefix probe (a row of its cell's `data`): the shared prefix plus
    question `index`."""

    index: int
    prompt_tokens: int
    ttft_s: float | None = None
    cached_tokens: int | None = None
    status: Literal["ok", "error"] = "ok"
    error: str | None = None


def prefix_size(spec: PrefixSettings, context: int | None) -> int:
    """The shared prefix's tokens: as the plan says, else half the context (at most 4,096;
    8,192 assumed where the engine reports none), leaving room for a question."""
    size = spec.prefix_tokens or min(4096, (context or 8192) // 2)
    return min(size, context - spec.question_tokens - 1) if context else size


class PrefixLoad(ProbeFinding):
    load: int
    ok: int
    prompt_tokens: int | None = None
    first_ttft_s: float | None = None
    first_cached_tokens: int | None = None
    later_ttft_s: float | None = None
    later_cached_tokens: int | None = None
    cached_reported: bool | None = None


class Prefix(ProbeFinding):
    """One arm: each load's requests, and over the loads the fewest cached tokens a later
    request got and the median TTFT of later requests."""

    loads: list[PrefixLoad]
    cells: list[str]
    prompt_tokens: int | None
    later_cached_tokens: int | None
    cached_reported: bool
    first_over_later_ttft: float | None
    later_ttft_s: float | None


class PrefixFinding(ProbeFinding):
    arms: dict[str, Prefix]


def prefix_arm(cells: Sequence[Cell]) -> Prefix:
    mine = sorted(cells, key=lambda c: c.load)
    loads: list[PrefixLoad] = []
    for cell in mine:
        ok = [s for s in rows(cell, PrefixSample) if s.status == "ok"]
        if not ok:
            loads.append(PrefixLoad(load=cell.load, ok=0))
            continue
        first, later = ok[0], ok[1:]
        cached = [s.cached_tokens for s in later if s.cached_tokens is not None]
        ttfts = [s.ttft_s for s in later if s.ttft_s is not None]
        loads.append(PrefixLoad(
            load=cell.load, ok=len(ok), prompt_tokens=first.prompt_tokens,
            first_ttft_s=first.ttft_s, first_cached_tokens=first.cached_tokens,
            later_ttft_s=statistics.median(ttfts) if ttfts else None,
            later_cached_tokens=min(cached) if cached else None, cached_reported=bool(cached)))
    good = [x for x in loads if x.later_ttft_s is not None]
    ratio = [x.first_ttft_s / x.later_ttft_s for x in good
             if x.later_ttft_s and x.first_ttft_s is not None]
    cached = [x.later_cached_tokens for x in loads if x.later_cached_tokens is not None]
    return Prefix(loads=loads, cells=[Layout.cell_ref(c.name) for c in mine],
                  prompt_tokens=loads[0].prompt_tokens,
                  later_cached_tokens=min(cached) if cached else None,
                  cached_reported=bool(cached),
                  first_over_later_ttft=statistics.median(ratio) if ratio else None,
                  later_ttft_s=statistics.median(x.later_ttft_s for x in good
                                                 if x.later_ttft_s is not None)
                  if good else None)


def reuse_text(a: str, b: str, pa: Prefix, pb: Prefix,
               kind: Literal["cost", "gain", "note"]) -> str:
    """What arm b's reuse is against arm a's, in words."""
    ca, cb = pa.later_cached_tokens, pb.later_cached_tokens
    ta, tb = pa.later_ttft_s, pb.later_ttft_s
    if ca is None and cb is None:
        return (f"prefix reuse: neither arm reports cached tokens; TTFT of repeated requests "
                f"`{a}` {num3(ta)} s vs `{b}` {num3(tb)} s")
    ttft = (f"; TTFT of later requests {num3(tb)} s vs {num3(ta)} s"
            + (f" ({tb / ta:.1f}x)" if ta and tb else ""))
    tokens = pa.prompt_tokens or 0
    if kind == "cost":
        return (f"prefix reuse lost: a repeated {tokens:,}-token prompt gets {cb or 0:,} cached "
                f"tokens under `{b}` vs {ca or 0:,} under `{a}`{ttft}")
    if kind == "gain":
        return (f"prefix reuse: {cb or 0:,} cached tokens under `{b}` vs {ca or 0:,} under "
                f"`{a}`{ttft}")
    return f"prefix reuse: the same under both arms ({ca} cached tokens){ttft}"


class PrefixProbe(Probe[PrefixSettings]):
    """A long shared prefix, then different questions, one at a time."""

    settings = PrefixSettings
    names = ("prefix",)
    description = "a shared prefix, then different questions: is it reused?"
    title = "prefix-cache reuse of a long shared system prompt"
    property_name = "prefix reuse"
    coverage = "a repeated shared prefix"
    finding = PrefixFinding

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
                add_row(out, PrefixSample(index=index, prompt_tokens=len(ids),
                                          status="error", error=str(exc)))
            else:
                add_row(out, PrefixSample(index=index, prompt_tokens=len(ids),
                                          ttft_s=round(time.monotonic() - t0, 6),
                                          cached_tokens=got.cached_tokens))
            obs.cell_advanced(len(out.data))
        ctx.finish(out)

    def analyse(self, plan: Plan, cells: Sequence[Cell]) -> PrefixFinding | None:
        arms = {arm: prefix_arm(mine) for arm in plan.arms
                if (mine := [c for c in cells if c.arm == arm])}
        return PrefixFinding(arms=arms) if arms else None

    def compare(self, finding: ProbeFinding, baseline: str, arm: str) -> list[ProbeClaim]:
        """Reuse lost (a cost), gained or the same: by the fewest cached tokens a later
        request got under each arm."""
        found = PrefixFinding.model_validate(finding)
        pa, pb = found.arms.get(baseline), found.arms.get(arm)
        if pa is None or pb is None:
            return []
        ca, cb = pa.later_cached_tokens, pb.later_cached_tokens
        compared = ca is not None or cb is not None
        kind: Literal["cost", "gain", "note"] = (
            "note" if not compared else "cost" if (ca or 0) > (cb or 0)
            else "gain" if (cb or 0) > (ca or 0) else "note")
        return [ProbeClaim(
            kind=kind, text=reuse_text(baseline, arm, pa, pb, kind),
            evidence=[*pa.cells, *pb.cells], severe=True, compared=compared,
            regime=f"a shared prefix, {pa.prompt_tokens} prompt tokens per request, "
                   "one at a time")]

    def report(self, finding: ProbeFinding) -> list[str]:
        found = PrefixFinding.model_validate(finding)
        lines = ["Prefix reuse (a shared long prefix, then different questions, one at a "
                 "time):", "",
                 "| arm | prompt tokens | cached tokens, later requests | TTFT first / later |",
                 "| --- | --- | --- | --- |"]
        for arm, p in found.arms.items():
            cached = "not reported" if p.later_cached_tokens is None else \
                f"{p.later_cached_tokens:,}"
            ratio = "-" if p.first_over_later_ttft is None else f"{p.first_over_later_ttft:.1f}x"
            lines.append(f"| `{arm}` | {cell_text(p.prompt_tokens)} | {cached} | {ratio} |")
        return lines
