"""The speed probe: TTFT, prefill tok/s and decode tok/s, replicated.

A replicate at prompt length L is two requests, each on a prompt of its own
(unique from its first token, so no prefix cache can serve it, see
prompts.py): one for a single token, whose latency is the TTFT, and one for
`max_tokens`, whose extra latency over the TTFT is the decode time. Streaming
is not needed, so every engine is measured the same way. At each level above
1 (`levels`, default 1 and 4), that many requests of each kind go at once:
the replicate keeps the medians of their latencies and the output throughput
of the long ones together. The first `warmup` replicates of each (level,
length) are kept but marked, and analysis drops them. Lengths that leave no
room for `max_tokens` in the context are skipped, with why.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from servediff.engines.base import Capability, Generated, Streamed
from servediff.errors import EngineError
from servediff.evidence import SpeedSample
from servediff.plan import Plan
from servediff.probes import prompts
from servediff.probes.base import Probe, Work
from servediff.probes.requests import frozen
from servediff.probes.settings import Cut, ProbeSettings, distinct_sorted, halved, tokens_list
from servediff.schedule import CellSpec

if TYPE_CHECKING:
    from servediff.probes.context import ProbeContext


class SpeedSettings(ProbeSettings):
    """Decode tok/s, TTFT and prefill tok/s, replicated in every cost load.

    TTFT is the latency of a request for one token (prefill plus the first token);
    decode tok/s is (max_tokens - 1) / (latency of max_tokens - TTFT). Every
    request gets its own prompt, so no prefix cache can serve it.
    """

    section = "speed"
    phase = "cost"
    # steady mode came after plans were locked with this probe
    later_defaults: ClassVar[dict[str, Any]] = {
        "mode": "burst", "requests": None, "request_rate": None}

    enabled: bool = Field(default=True, description="false: the probe does not run")
    prompt_tokens: list[Annotated[int, Field(ge=2)]] = Field(
        default_factory=lambda: [512, 2048], description="prompt lengths, each its own "
        "prompt (no prefix cache can serve it)")
    max_tokens: Annotated[int, Field(ge=2, le=4096)] = Field(
        default=64, description="tokens generated for decode tok/s")
    warmup: Annotated[int, Field(ge=0, le=20)] = Field(
        default=1, description="replicates per cost load kept in the evidence, not analysed")
    replicates: Annotated[int, Field(ge=1, le=50)] = Field(
        default=3, description="replicates per cost load (two cost loads: 6 per arm)")
    levels: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default_factory=lambda: [1, 4], description="requests in flight: 1 is the "
        "single-stream baseline; above it that many go at once (a flag free alone can cost "
        "under load)")
    mode: Literal["burst", "steady"] = Field(
        default="burst",
        description="burst: each level's requests at once, all prefills first (the "
        "regime survival is about); steady: streamed, `level` in flight, a new one as one "
        "ends (as `vllm bench serve --max-concurrency`), TTFT and ITL from the stream")
    requests: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None, examples=[12], description="steady: requests per replicate and level "
        "(default: 3 per request in flight)")
    request_rate: Annotated[float, Field(gt=0)] | None = Field(
        default=None, examples=[2.0], description="steady: requests started per second, Poisson "
        "arrivals (default: one as soon as one in flight ends)")

    @field_validator("levels")
    @classmethod
    def _levels(cls, levels: list[int]) -> list[int]:
        return distinct_sorted(levels, "needs at least one level (1: one request at a time)")

    @model_validator(mode="after")
    def _steady_only(self) -> SpeedSettings:
        if self.mode == "burst" and (self.requests is not None or self.request_rate):
            raise ValueError("requests and request_rate are settings of mode = \"steady\"")
        return self

    def refused(self, engine: str, capabilities: Set[Capability]) -> str | None:
        if self.on() and self.mode == "steady" and "stream" not in capabilities:
            return (f"probes.speed.mode: \"steady\" needs streamed tokens, and engine "
                    f"{engine!r} does not stream; use mode = \"burst\"")
        return None

    def cuts(self, context: int | None) -> list[Cut]:
        """Fewer generated tokens a request (to 8 at least, in two steps, the second of the
        last cuts made), then shorter prompts (128 tokens at least): every level and
        replicate stays, and with them the noise band."""
        made: list[Cut] = []
        tokens = self.max_tokens
        for rank in (20, 110):
            if (fewer := halved(tokens, 8)) is not None:
                made.append(Cut(rank, f"speed: {fewer} generated tokens a request, not "
                                      f"{tokens}", {"max_tokens": fewer}))
                tokens = fewer
        shorter = sorted({n // 2 for n in self.prompt_tokens if n // 2 >= 128})
        if shorter and shorter != self.prompt_tokens:
            says = (f"{shorter[0]:,}-token prompts, not {self.prompt_tokens[0]:,}"
                    if len(self.prompt_tokens) == 1 == len(shorter) else
                    f"prompts of {tokens_list(shorter)} tokens, not "
                    f"{tokens_list(self.prompt_tokens)}")
            made.append(Cut(50, f"speed: {says}", {"prompt_tokens": shorter}))
        return sorted(made, key=lambda cut: cut.rank)

    def per_replicate(self, level: int) -> int:
        """Requests in one replicate at this level: burst sends `level` of each kind."""
        if self.mode == "burst":
            return level
        return self.requests if self.requests is not None else 3 * level


def in_flight(level: int) -> str:
    return "one request at a time" if level == 1 else f"{level} requests at once"


def levels_text(levels: list[int]) -> str:
    """[1] -> "one request at a time"; [1, 4] -> "1 and 4 requests at a time"."""
    if levels == [1]:
        return in_flight(1)
    if len(levels) == 1:
        return in_flight(levels[0])
    return f"{', '.join(map(str, levels[:-1]))} and {levels[-1]} requests at a time"


def _timed(ctx: ProbeContext, ids: list[int], max_tokens: int) -> tuple[Generated, float]:
    t0 = time.monotonic()
    out = ctx.adapter.generate(ctx.engine, ids, max_tokens, ctx.options)
    return out, time.monotonic() - t0


class SpeedProbe(Probe[SpeedSettings]):
    """TTFT, prefill and decode speed per prompt length and level, in every cost load."""

    settings = SpeedSettings
    names = ("speed",)
    description = "TTFT, prefill and decode tok/s, in every cost load"
    title = "decode tok/s, TTFT, prefill tok/s with noise bands"

    def protocol(self, spec: SpeedSettings) -> str | None:
        steady = ("" if spec.mode == "burst" else
                  f", steady: {spec.requests or '3 per level'} streamed requests a replicate "
                  "with that many in flight, "
                  + (f"{spec.request_rate:g} a second (Poisson)" if spec.request_rate
                     else "each started as one finishes"))
        return (f"speed at {spec.prompt_tokens} prompt tokens, {spec.max_tokens} output tokens, "
                f"{levels_text(spec.levels)}{steady}, {spec.warmup} warm-up + "
                f"{spec.replicates} replicates per cost load")


    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        return [CellSpec(arm, load, "speed", 0, "cost")] if self.spec(plan).enabled else []

    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        spec = self.spec(plan)
        # per length and replicate: burst, `level` requests for one token and `level` for
        # max_tokens; steady, `requests` for max_tokens
        sent = (spec.warmup + spec.replicates) * sum(spec.per_replicate(n) for n in spec.levels)
        kinds, extra = (2, 1) if spec.mode == "burst" else (1, 0)
        return Work(requests=kinds * sent * len(spec.prompt_tokens),
                    prompt_tokens=kinds * sent * sum(spec.prompt_tokens),
                    new_tokens=sent * len(spec.prompt_tokens) * (spec.max_tokens + extra))

    def measure(self, ctx: ProbeContext, cell: CellSpec) -> None:
        spec = self.spec(ctx.plan)
        source = prompts.Prompts(ctx.stream)
        lengths, skipped = ctx.fits(spec.prompt_tokens, spec.max_tokens)
        obs = ctx.observer
        obs.cell_starting(cell.name, len(lengths) * len(spec.levels)
                          * (spec.warmup + spec.replicates))
        out = ctx.cell(cell)
        out.skipped = skipped
        n = prompts.SPEED
        for level in spec.levels:
            for length in lengths:
                for replicate in range(spec.warmup + spec.replicates):
                    base: dict[str, Any] = dict(replicate=replicate,
                                                warmup=replicate < spec.warmup,
                                                prompt_tokens=length, concurrency=level)
                    if spec.mode == "steady":
                        count = spec.per_replicate(level)
                        batch = [source.unique(length, n + i) for i in range(count)]
                        n += count
                        out.speed.append(_steady(ctx, spec, base, batch, level, length,
                                                 seed=n))
                        obs.cell_advanced(len(out.speed))
                        continue
                    short = [source.unique(length, n + i) for i in range(level)]
                    long = [source.unique(length, n + level + i) for i in range(level)]
                    n += 2 * level
                    try:
                        firsts, _ = _at_once(ctx, short, 1)
                        fulls, wall = _at_once(ctx, long, spec.max_tokens)
                    except EngineError as exc:
                        frozen(exc)  # a hang ends the launch; an error is a sample
                        out.speed.append(SpeedSample(**base, status="error", error=str(exc)))
                    else:
                        out.speed.append(_sample(base, firsts, fulls, wall, length))
                    obs.cell_advanced(len(out.speed))
        ctx.finish(out)


def _at_once(ctx: ProbeContext, batch: list[list[int]], max_tokens: int
             ) -> tuple[list[tuple[Generated, float]], float]:
    """Each prompt's answer and latency, all sent at once; and the wall time of the whole.
    One prompt is sent from this thread."""
    t0 = time.monotonic()
    if len(batch) == 1:
        timed = [_timed(ctx, batch[0], max_tokens)]
    else:
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            timed = list(pool.map(lambda ids: _timed(ctx, ids, max_tokens), batch))
    return timed, time.monotonic() - t0


def _sample(base: dict[str, Any], firsts: list[tuple[Generated, float]],
            fulls: list[tuple[Generated, float]], wall: float, length: int) -> SpeedSample:
    """One replicate: medians over the requests that were in flight together."""
    ttft = statistics.median(t for _, t in firsts)
    total = statistics.median(t for _, t in fulls)
    generated = int(statistics.median(len(g.token_ids) for g, _ in fulls))
    decode = total - ttft
    return SpeedSample(
        **base, achieved_prompt_tokens=firsts[0][0].prompt_tokens,
        ttft_s=round(ttft, 6), total_s=round(total, 6), generated=generated,
        prefill_tok_s=round(length / ttft, 3),
        decode_tok_s=round((generated - 1) / decode, 3)
        if decode > 0 and generated > 1 else None,
        throughput_tok_s=round(sum(len(g.token_ids) for g, _ in fulls) / wall, 3)
        if wall > 0 else None)


def _steady(ctx: ProbeContext, spec: SpeedSettings, base: dict[str, Any],
            batch: list[list[int]], level: int, length: int, seed: int) -> SpeedSample:
    """One steady replicate: the prompts streamed with `level` in flight, each started as
    one finishes and not before its arrival (Poisson at `request_rate`, seeded); medians
    over the requests, output throughput over the whole."""
    rate = spec.request_rate
    arrivals = (np.cumsum(np.random.default_rng(seed).exponential(1 / rate, len(batch)))
                if rate else np.zeros(len(batch)))
    t0 = time.monotonic()

    def one(i: int) -> Streamed:
        wait = t0 + float(arrivals[i]) - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        return ctx.adapter.stream(ctx.engine, batch[i], spec.max_tokens, ctx.options)

    common = dict(base, mode="steady", requests=len(batch))
    try:
        with ThreadPoolExecutor(max_workers=level) as pool:
            done = list(pool.map(one, range(len(batch))))
    except EngineError as exc:
        frozen(exc)
        return SpeedSample(**common, status="error", error=str(exc))
    wall = time.monotonic() - t0
    ttft = statistics.median(s.ttft_s for s in done if s.ttft_s is not None)
    total = statistics.median(s.total_s for s in done)
    itl = [gap for s in done for gap in s.itl_s]
    # per request, as `vllm bench serve` has it: 1 / TPOT, (tokens - 1) / (time of the
    # last token - TTFT)
    decode = [(s.completion_tokens - 1) / (s.chunk_s[-1] - s.chunk_s[0]) for s in done
              if s.completion_tokens > 1 and s.chunk_s[-1] > s.chunk_s[0]]
    return SpeedSample(
        **common, achieved_prompt_tokens=done[0].prompt_tokens, ttft_s=round(ttft, 6),
        total_s=round(total, 6),
        generated=int(statistics.median(s.completion_tokens for s in done)),
        prefill_tok_s=round(length / ttft, 3) if ttft > 0 else None,
        decode_tok_s=round(statistics.median(decode), 3) if decode else None,
        itl_s=round(statistics.median(itl), 6) if itl else None,
        throughput_tok_s=round(sum(s.completion_tokens for s in done) / wall, 3)
        if wall > 0 else None)
