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

from servediff.evidence import Group, RequestKind, Response, Skipped
from servediff.plan import Plan
from servediff.probes import requests
from servediff.probes.base import Probe, Work
from servediff.schedule import CellSpec
from servediff.session import LoadSession


def prompt_of_length(stream: list[int], head: list[int], length: int) -> list[int]:
    """`head` then the token stream (repeated if short), `length` ids in all."""
    body = length - len(head)
    reps = body // max(len(stream), 1) + 1
    return head + (stream * reps)[:body]


class Concurrency(Probe):
    names = ("concurrency",)
    phase = "drift"

    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        spec = plan.probes.concurrency
        return [CellSpec(arm, load, "concurrency", 0)] if spec.enabled and (
            spec.loads is None or load in spec.loads) else []

    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        spec = plan.probes.concurrency
        per_length = len(spec.levels) * spec.requests
        new = spec.max_tokens if "generate" in spec.kinds else 0
        return Work(requests=len(spec.kinds) * len(spec.lengths) * per_length,
                    prompt_tokens=len(spec.kinds) * per_length * sum(spec.lengths),
                    new_tokens=new * len(spec.lengths) * per_length)

    def measure(self, session: LoadSession, cell: CellSpec) -> None:
        spec = session.plan.probes.concurrency
        adapter, client, options = session.adapter, session.engine, session.options
        head, _ = session.head
        lengths, skipped = session.fits(spec.lengths, spec.max_tokens)
        prompts = {n: prompt_of_length(session.stream, head, n) for n in lengths}
        kinds = list(spec.kinds)
        if "score" in kinds and adapter.concurrent_scoring_gap:
            kinds.remove("score")
            skipped.append(Skipped(kind="score", reason=adapter.concurrent_scoring_gap))
        obs = session.room.observer
        obs.cell_starting(cell.name, len(prompts) * len(spec.levels) * len(kinds))
        out = session.cell(cell)
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
        session.finish(out, time.monotonic() - t0)
