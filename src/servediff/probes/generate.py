"""The generate probe: corpus prompts continued greedily, repeated one at a time.

Each prompt's `repeats` generations are sent one after another (nothing else
in flight), so what differs between them is the load's own state, not batch
neighbours. Analysis compares them within the load, across loads and arms.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from servediff.evidence import Group
from servediff.plan import Plan
from servediff.probes import requests
from servediff.probes.base import Probe, Work
from servediff.schedule import CellSpec
from servediff.session import LoadSession


class Generate(Probe):
    names = ("generate",)
    phase = "drift"

    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        return [CellSpec(arm, load, "generate", 0)] if plan.probes.generate.enabled else []

    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        spec = plan.probes.generate
        prompts = [min(n, spec.prompt_tokens) for n in texts[: spec.texts]]
        return Work(requests=len(prompts) * spec.repeats,
                    prompt_tokens=sum(prompts) * spec.repeats,
                    new_tokens=len(prompts) * spec.repeats * spec.max_tokens)

    def measure(self, session: LoadSession, cell: CellSpec) -> None:
        spec = session.plan.probes.generate
        tags = [t.tag for t in session.room.corpus.texts][: spec.texts]
        prompts = {tag: session.ids[tag][: spec.prompt_tokens] for tag in tags}
        obs = session.room.observer
        obs.cell_starting(cell.name, len(prompts))
        out = session.cell(cell, tags)
        t0 = time.monotonic()
        for tag, ids in prompts.items():
            responses = [requests.generation(session.adapter, session.engine, ids,
                                             spec.max_tokens, session.options, i)
                         for i in range(spec.repeats)]
            out.groups.append(Group(tag=tag, length=len(ids), level=1,
                                    max_tokens=spec.max_tokens,
                                    prompt_sha256=requests.prompt_sha256(ids),
                                    responses=responses))
            obs.cell_advanced(len(out.groups))
        session.finish(out, time.monotonic() - t0)
