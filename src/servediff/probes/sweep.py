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

After the single prompts of the plan, the sweep bisects: between the longest
single prompt that held and the shortest that failed inside the context, one
length at a time, until the two are `resolution` tokens apart (default: 64 or
5 % of the failing length, whichever is larger). The lengths it adds are
appended to the cell's plan as they are chosen, so a restart goes on with them.

Points are measured one by one, and the points so far are kept after each
(`partial/<cell>-progress.json`): a point that kills the engine is recorded,
the runner starts the arm again and the next launch goes on with the point
after it. Every request's prompt is unique from its first token (prompts.py),
so no prefix cache can shorten a long prompt.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, field_validator

from servediff import atomic
from servediff.bundle import read_record
from servediff.engines.base import EngineAdapter, EngineOptions, Generated
from servediff.engines.process import tail
from servediff.engines.transport import EngineClient
from servediff.errors import EngineError, EngineRequestError
from servediff.evidence import Cell, Skipped, SweepPoint
from servediff.plan import Plan
from servediff.probes import prompts
from servediff.probes.base import Measured, Probe, Work
from servediff.probes.settings import Cut, ProbeSettings
from servediff.schedule import CellSpec

if TYPE_CHECKING:
    from servediff.probes.context import ProbeContext


class SweepSettings(ProbeSettings):
    """Prompt lengths up to the context length and past it; survival per length.

    `lengths` empty: doubling from `start` to the context length the engine
    reports, the context length itself, and one length past it (whose error
    response is part of the map). Each level above 1 sends that many prompts of
    the length at once (several in one prefill).
    """

    section = "sweep"
    phase = "cost"

    enabled: bool = Field(default=True, description="false: the probe does not run")
    lengths: list[Annotated[int, Field(ge=2)]] = Field(
        default_factory=list, description="prompt tokens; empty: doubling from `start` to "
        "the context, the context itself, and one past it")
    start: Annotated[int, Field(ge=2)] = Field(default=512, description="the first doubled length")
    levels: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default_factory=lambda: [1, 4], description="prompts of a length sent at once "
        "(several in one prefill)")
    request_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=120.0,
        description="past it, the engine is watched: no work for a stall window is a "
        'hang; a later answer is "slow" (it survived)')
    give_up_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None, examples=[1200], description='a busy engine not done by then is given up on '
        '("timeout"); default: 10 x request_timeout_s')
    tolerance: Annotated[float, Field(ge=0, le=0.5)] = Field(
        default=0.02,
        description="achieved prompt tokens within this fraction of the nominal count")
    resolution: Annotated[int, Field(ge=0)] | None = Field(
        default=None, examples=[64], description="after a single prompt fails inside the context, "
        "lengths are bisected to this many tokens between the longest that held and the "
        "shortest that failed (default: 64 or 5 % of the failing length; 0: no bisection)")

    def resolution_at(self, length: int) -> int:
        """How close the bisection brings the limit below a failure at `length`."""
        return self.resolution if self.resolution is not None else max(64, length // 20)

    @field_validator("levels")
    @classmethod
    def _levels(cls, levels: list[int]) -> list[int]:
        if 1 not in levels:
            raise ValueError("must include 1: a single prompt of each length")
        return sorted(set(levels))

    def cuts(self, context: int | None) -> list[Cut]:
        """The doubled lengths from twice the start, twice (the second among the last cuts
        made): the context and one past it always stay, and with them the survival
        limit's bisection. Only where the plan sets the context and no lengths."""
        if self.lengths or context is None:
            return []
        made: list[Cut] = []
        start = self.start
        for rank in (60, 90):
            if start >= context:
                break
            later = min(2 * start, context)
            says = ("the context and one past it only" if later >= context else
                    f"from {later:,} tokens to the context, not from {start:,}")
            made.append(Cut(rank, f"sweep: {says}", {"start": later}))
            start = later
        return made

# Prompt numbers per point: room for every level a plan allows.
PER_POINT = 64


def points(spec: SweepSettings, context: int | None, limit: int | None = None
           ) -> list[tuple[int, int]]:
    """(length, level) in the order they are sent: single prompts first, short to long.
    `limit`: the longest prompt the engine says it accepts, when that is below the context
    (SGLang: 6 tokens below it); it is a point of its own, below the context's."""
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
        if limit is not None and spec.start <= limit < context - 1 and limit not in lengths:
            lengths = sorted([*lengths, limit])
    fits = [n for n in lengths if context is None or n < context]
    return [(n, 1) for n in lengths] + [(n, c) for c in spec.levels if c > 1 for n in fits]


def bisection_bound(spec: SweepSettings, context: int | None) -> int:
    """The most single prompts a bisection can add to one sweep: between the two planned
    lengths furthest apart that a failure could fall between (0: none, or it is off)."""
    if spec.resolution == 0:
        return 0
    singles = sorted(n for n, level in points(spec, context) if level == 1
                     and (context is None or n < context))
    most = 0
    for held, top in itertools.pairwise(singles):
        steps, gap = 0, top - held
        while gap > max(spec.resolution_at(top), 1):
            gap, steps = (gap + 1) // 2, steps + 1
        most = max(most, steps)
    return most


def failed(point: SweepPoint, context: int | None) -> bool:
    """A refusal of a prompt longer than the context is the server doing its job; an
    error inside the context, a hang, a timeout or a death anywhere is a failure."""
    beyond = context is not None and point.length + 1 > context
    return point.outcome in ("hang", "timeout", "death") or (point.outcome == "error"
                                                             and not beyond)


def bracket(done: Sequence[SweepPoint], context: int | None) -> tuple[int, int] | None:
    """(longest single prompt that held below the shortest that failed, that failure)."""
    singles = [p for p in done if p.level == 1]
    failures = [p.length for p in singles if failed(p, context)]
    if not failures:
        return None
    top = min(failures)
    held = [p.length for p in singles if p.outcome in ("ok", "slow") and p.length < top]
    return (max(held), top) if held else None


def bisect(spec: SweepSettings, done: Sequence[SweepPoint], context: int | None
           ) -> int | None:
    """The next length to send between the last that held and the first that failed, or
    None once they are within the resolution (or nothing failed after a length held)."""
    found = bracket(done, context)
    if found is None:
        return None
    held, top = found
    if top - held <= max(spec.resolution_at(top), 1) or spec.resolution == 0:
        return None
    return (held + top) // 2


def next_point(spec: SweepSettings, out: Cell) -> tuple[tuple[int, int] | None, bool]:
    """The next (length, level) to send and whether the bisection added it: the plan's
    single prompts first, then the bisection, then the plan's other levels."""
    done = {(p.length, p.level) for p in out.sweep}
    pending = [(n, c) for n, c in out.sweep_plan if (n, c) not in done]
    single = [x for x in pending if x[1] == 1]
    if single:
        return single[0], False
    length = bisect(spec, out.sweep, out.context_length)
    if length is not None and (length, 1) not in done:
        return (length, 1), True
    return (pending[0] if pending else None), False


@dataclass(frozen=True)
class Liveness:
    """How the sweep asks about the server: has it exited, does health answer."""

    exited: Callable[[], tuple[int | None, str | None] | None]
    healthy: Callable[[], bool]
    log_tail: Callable[[], str]


def send(adapter: EngineAdapter, client: EngineClient, options: EngineOptions,
         batch: list[list[int]], spec: SweepSettings, live: Liveness, launch: int,
         watched: bool = True) -> SweepPoint:
    """Send the point's prompts at once (one per level) and classify what happened."""
    length, level = len(batch[0]), len(batch)

    def one(ids: list[int]) -> tuple[Generated | EngineRequestError, float]:
        r0 = time.monotonic()
        try:
            out: Generated | EngineRequestError = adapter.generate(client, ids, 1, options)
        except EngineRequestError as exc:
            out = exc
        return out, round(time.monotonic() - r0, 3)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=level) as pool:
        timed = list(pool.map(one, batch))
    seconds = round(time.monotonic() - t0, 3)
    results = [r for r, _ in timed]
    achieved = [r.prompt_tokens if isinstance(r, Generated) else None for r in results]
    cached = [r.cached_tokens if isinstance(r, Generated) else None for r in results]
    errors = [r for r in results if isinstance(r, EngineRequestError)]
    base: dict[str, Any] = dict(length=length, level=level, seconds=seconds, launch=launch,
                                achieved_prompt_tokens=achieved, cached_tokens=cached,
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


class SweepProbe(Probe[SweepSettings]):
    """Prompt lengths up to the context and past it, alone and together: what survives."""

    settings = SweepSettings
    names = ("sweep",)
    description = "prompts up to the context and past it, alone and together: survival"
    title = "prompt lengths up to the context length, survival per length"

    def protocol(self, spec: SweepSettings) -> str | None:
        return (f"sweep from {spec.start} tokens to the context and past it at levels "
                f"{spec.levels}" if not spec.lengths else
                f"sweep at {spec.lengths} x levels {spec.levels}")

    def measured(self, found: Measured) -> bool:
        # a sweep's points so far count too: the engine may have died before it ended
        return any(c.probe == "sweep" for c in (*found.cells, *found.partial))

    def size_note(self, plan: Plan, context: int) -> str | None:
        most = bisection_bound(self.spec(plan), context)
        bisect = (f"; a failure inside it adds up to {most} bisection prompts per sweep, "
                  "each may need a restart") if most else ""
        return (f"the sweep counted up to a context of {context:,} tokens; the engine "
                f"reports its own{bisect}")

    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        # Once per arm, last in its cost load: it may kill the engine.
        return [CellSpec(arm, load, "sweep", 0, "cost")] \
            if self.spec(plan).enabled and load == 1 else []

    @staticmethod
    def progress(ctx: ProbeContext, cell: CellSpec) -> Cell | None:
        """The sweep's points so far, kept by earlier launches."""
        path = ctx.layout.progress(cell.name)
        return read_record(path, Cell) if path.exists() else None

    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        sent = points(self.spec(plan), context)
        return Work(requests=sum(level for _, level in sent),
                    prompt_tokens=sum(length * level for length, level in sent),
                    new_tokens=sum(level for _, level in sent))

    def measure(self, ctx: ProbeContext, cell: CellSpec) -> None:
        spec = self.spec(ctx.plan)
        layout, obs, proc = ctx.layout, ctx.observer, ctx.proc
        out = self.progress(ctx, cell)
        if out is None:
            out = ctx.cell(cell)
            out.sweep_plan = points(spec, ctx.context_length, ctx.prompt_limit)
            if not out.sweep_plan:
                out.skipped = [Skipped(reason="the engine reports no context length and the "
                                       "plan gives no sweep lengths")]
        client = ctx.client_for(spec.request_timeout_s, spec.give_up_s)
        try:
            source = prompts.Prompts(ctx.stream)
            obs.cell_starting(cell.name, len(out.sweep_plan))
            obs.cell_advanced(len(out.sweep))
            live = Liveness(
                exited=(lambda: proc.exit_status(2.0)) if proc else (lambda: None),
                healthy=lambda: client.healthy(ctx.adapter.health_path()),
                log_tail=lambda: tail(proc.log_path) if proc else "")
            while True:
                chosen, added = next_point(spec, out)
                if chosen is None:
                    break
                if added:
                    out.sweep_plan.append(chosen)
                    obs.cell_starting(cell.name, len(out.sweep_plan))
                    obs.cell_advanced(len(out.sweep))
                length, level = chosen
                index = out.sweep_plan.index(chosen)
                batch = [source.unique(length, prompts.SWEEP + PER_POINT * index + i)
                         for i in range(level)]
                point = send(ctx.adapter, client, ctx.options, batch, spec, live,
                             ctx.attempt, watched=proc is not None)
                out.sweep.append(point)
                out.engine_seconds = round(out.engine_seconds + point.seconds, 6)
                atomic.write_json(layout.progress(cell.name), out.model_dump(mode="json"))
                obs.cell_advanced(len(out.sweep))
                if point.outcome in ("death", "hang", "timeout"):
                    last = next_point(spec, out)[0] is None
                    if last:
                        # Nothing is left to measure: no cold start just to close the cell.
                        self._close(ctx, out, cell)
                    raise EngineError(f"sweep: {point.outcome} at {length} tokens x {level} "
                                      "(recorded as a measurement"
                                      + ("" if last else "; the engine is restarted") + ")")
            self._close(ctx, out, cell)
        finally:
            client.close()

    @staticmethod
    def _close(ctx: ProbeContext, out: Cell, cell: CellSpec) -> None:
        ctx.finish(out, out.engine_seconds)
        ctx.layout.progress(cell.name).unlink(missing_ok=True)
