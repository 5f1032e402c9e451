"""The repeat probe (`[probes.repeat]`): every corpus text teacher-forced, then again
within the same load.

Cells: `score` (the first pass), `repeat` r1..rN (the same texts again, in a
shuffled order by default) and `batch` bB (the same texts scored B to a
request, padded into one batch by engines that batch). A row that came back
is raw evidence whatever its status. When the engine dies mid-cell, the rows
measured before are kept apart (`partial/`) and the cell stays to be measured
again by the next launch.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from servediff import atomic
from servediff.engines.base import Scored
from servediff.errors import EngineError, EngineRequestError
from servediff.evidence import Record
from servediff.plan import Plan
from servediff.probes.base import Measured, Probe, Untested, Work
from servediff.probes.settings import PlanShape, ProbeSettings, check_loads
from servediff.schedule import CellSpec

if TYPE_CHECKING:
    from servediff.probes.context import ProbeContext


class RepeatSettings(ProbeSettings):
    section = "repeat"
    phase = "drift"

    count: Annotated[int, Field(ge=0, le=100)] = Field(
        default=1, description="within-load repeats of every text, after the first scoring")
    shuffle: bool = Field(default=True, description="each repeat in a new shuffled order")
    batch_sizes: list[Annotated[int, Field(ge=1, le=256)]] = Field(
        default_factory=list, examples=[[4]],
        description="extra passes in the same load at these scoring batch sizes (texts per "
        "request, one padded batch on engines that batch), the plain repeats the control")
    loads: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, examples=[[2]], description="the drift loads that run the repeats and batch "
        "passes (default: every one); one load per arm shows within-load drift, every load "
        "confirms it")

    def check(self, plan: PlanShape) -> None:
        check_loads(plan, self.section, self.loads)


def nll(logprobs: list[float]) -> float:
    """Sum NLL of a text; fsum so the value does not depend on summation order."""
    return -math.fsum(logprobs)


def record(tag: str, token_ids: list[int], prefix: str, batch: int, batch_size: int,
           seconds: float, result: Scored | None, error: str | None) -> Record:
    """One raw row: what was sent, what came back, and whether it can be trusted."""
    if result is None:
        return Record(tag=tag, token_ids=token_ids, prefix=prefix, n_tokens=len(token_ids),
                      n_scored=0, token_logprobs=[], sum_nll=None, server_prompt_tokens=None,
                      batch=batch, batch_size=batch_size, seconds=round(seconds, 6),
                      status="error", error=error)
    return Record(
        tag=tag, token_ids=token_ids, prefix=prefix, n_tokens=len(token_ids),
        n_scored=len(result.token_logprobs), token_logprobs=result.token_logprobs,
        sum_nll=nll(result.token_logprobs) if result.invalid is None else None,
        server_prompt_tokens=result.server_prompt_tokens, batch=batch, batch_size=batch_size,
        seconds=round(seconds, 6), status="ok" if result.invalid is None else "invalid",
        error=result.invalid,
    )


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


class RepeatProbe(Probe[RepeatSettings]):
    """Every text teacher-forced, then again in the same load (repeats, batch sizes)."""

    settings = RepeatSettings
    names = ("score", "repeat", "batch")
    description = "the texts scored again in the same load (in a new order): within-load drift"
    title = "teacher-forced scores, and the same texts again within the load"

    def untested(self, plan: Plan, found: Measured) -> Untested | None:
        # every run scores; repeats left out show as "0 repeat(s)" in the protocol
        return None

    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        repeat = self.spec(plan)
        if repeat.loads is not None and load not in repeat.loads:
            return [CellSpec(arm, load, "score", 0)]
        return [CellSpec(arm, load, "score", 0),
                *(CellSpec(arm, load, "repeat", r) for r in range(1, repeat.count + 1)),
                *(CellSpec(arm, load, "batch", 0, batch_size=b) for b in repeat.batch_sizes)]

    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        requests = -(-len(texts) // cell.batch_size) if cell.batch_size else len(texts)
        return Work(requests=requests, prompt_tokens=sum(texts), new_tokens=0)

    def order(self, ctx: ProbeContext, cell: CellSpec) -> list[str]:
        tags = [t.tag for t in ctx.corpus.texts]
        if cell.probe == "repeat" and self.spec(ctx.plan).shuffle:
            random.Random(f"{cell.arm}/{cell.load}/{cell.repeat}").shuffle(tags)
        return tags

    def measure(self, ctx: ProbeContext, cell: CellSpec) -> None:
        order = self.order(ctx, cell)
        ids, (_, label) = ctx.ids, ctx.scoring_prefix
        obs = ctx.observer
        obs.cell_starting(cell.name, len(order))
        out = ctx.cell(cell, order)
        engine_seconds = 0.0
        size = cell.batch_size or ctx.options.batch_size
        for batch_no, batch_tags in enumerate(_chunks(order, size)):
            batch = [ids[tag] for tag in batch_tags]
            r0 = time.monotonic()
            hung = False
            try:
                results: list[Scored] = ctx.adapter.score(ctx.engine, batch,
                                                              ctx.options)
                error = None
            except EngineError as exc:
                results, error = [], str(exc)
                # no answer and no work for a whole stall window: frozen, not slow
                hung = isinstance(exc, EngineRequestError) and exc.stalled
            seconds = time.monotonic() - r0
            engine_seconds += seconds
            for i, tag in enumerate(batch_tags):
                out.records.append(record(tag, ids[tag], label, batch_no, len(batch_tags),
                                          seconds, results[i] if error is None else None,
                                          error))
            obs.cell_advanced(len(out.records))
            if error is not None and ctx.proc is not None and \
                    (hung or ctx.proc.exited_within(1.0)):
                # The rows measured before the death (or the hang: the launch is stopped
                # and started again) are evidence too: kept apart, so the cell itself
                # stays to be measured again.
                out.wall_seconds = round(time.time() - out.started_at, 6)
                out.engine_seconds = round(engine_seconds, 6)
                layout = ctx.layout
                path = layout.partial(cell.name, out.launch)
                atomic.write_json(path, out.model_dump(mode="json"))
                raise EngineError(
                    f"engine process {'hung' if hung else 'died'} during {cell.name} "
                    f"({len(out.records)} of {len(order)} rows kept in "
                    f"{path.relative_to(layout.root)}): {error}")
        ctx.finish(out, engine_seconds)
