"""The probes, in the order their cells run within a load, and the registry by cell name.

Adding a probe is one module with a `Probe` subclass plus its entry in `ORDER`.
Drift probes, then cost probes; within the cost phase speed runs first, before
anything long can hurt the engine, and the sweep, which may kill it, last.
"""

from __future__ import annotations

from dataclasses import dataclass

from servediff.corpus import Corpus
from servediff.evidence import Phase
from servediff.plan import Plan
from servediff.probes.base import Probe, Work
from servediff.probes.concurrency import Concurrency
from servediff.probes.generate import Generate
from servediff.probes.prefix import Prefix
from servediff.probes.score import Score
from servediff.probes.speed import Speed
from servediff.probes.sweep import Sweep
from servediff.schedule import CellSpec, schedule

ORDER: tuple[Probe, ...] = (Score(), Concurrency(), Generate(), Speed(), Prefix(), Sweep())
BY_NAME: dict[str, Probe] = {name: probe for probe in ORDER for name in probe.names}


def cells_of_load(plan: Plan, arm: str, load: int, phase: Phase = "drift") -> list[CellSpec]:
    return [cell for probe in ORDER if probe.phase == phase
            for cell in probe.cells(plan, arm, load)]


@dataclass(frozen=True)
class Size:
    """A protocol's size: loads, cells and about how many requests they send."""

    loads: int
    cells: int
    requests: int
    # about how many prompt tokens they send and tokens they ask the engine to generate
    prompt_tokens: int
    new_tokens: int
    # the context assumed for the sweep (the engine reports its own once it runs)
    context: int


# for the size of the corpus before any tokenizer is at hand: English prose in the BPE
# vocabularies of current models
CHARS_PER_TOKEN = 4


def protocol_size(plan: Plan, corpus: Corpus, context: int | None = None) -> Size:
    """The whole plan's size; `context` defaults to the plan's max_model_len, else 8,192."""
    if context is None:
        given = plan.engine_options.get("max_model_len")
        context = given if isinstance(given, int) else 8192
    loads = schedule(plan)
    cells = [cell for arm, load, phase in loads for cell in cells_of_load(plan, arm, load, phase)]
    texts = [max(1, len(t.text) // CHARS_PER_TOKEN) for t in corpus.texts]
    work = sum((BY_NAME[c.probe].work(plan, texts, context, c) for c in cells), Work(0, 0, 0))
    return Size(loads=len(loads), cells=len(cells), requests=work.requests,
                prompt_tokens=work.prompt_tokens, new_tokens=work.new_tokens, context=context)
