"""The probe registry: plan sections to lazy `module:Class` entries, in the order cells run.

Adding a probe is one module (its settings, cells, measurement, description and,
where it has one, its own finding and report lines: probes/base.py) plus its
line in `PROBES` (probes/settings.py, the leaf the plan reads its `[probes.*]`
tables from). The schedule, the size estimate, the summary's "not tested"
list, `servediff init` and the report read the probes from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from servediff.engines import registry
from servediff.probes.settings import PROBES, entry

if TYPE_CHECKING:
    from servediff.corpus import Corpus
    from servediff.evidence import Phase
    from servediff.plan import Plan
    from servediff.probes.base import Probe
    from servediff.schedule import CellSpec


@cache
def _load(entry: str) -> Probe[Any]:
    probe: Probe[Any] = registry.instance(entry)
    return probe


def ordered() -> list[Probe[Any]]:
    """Every registered probe, in the order its cells run."""
    return [_load(entry) for entry in PROBES.values()]


def by_section(section: str) -> Probe[Any]:
    """The probe of the plan's `[probes.<section>]` table."""
    return _load(entry(section))


def by_cell(probe_name: str) -> Probe[Any]:
    """The probe that measures cells of this probe name ("batch": the repeat probe)."""
    for probe in ordered():
        if probe_name in probe.names:
            return probe
    raise KeyError(f"no registered probe measures {probe_name!r} cells; the probes are "
                   f"{', '.join(PROBES)}")


def cells_of_load(plan: Plan, arm: str, load: int, phase: Phase = "drift") -> list[CellSpec]:
    """The cells a load measures, in order: a combined drift load's cost cells (of the
    cost load of its number) come after its drift cells."""
    phases: list[Phase] = [phase]
    if phase == "drift" and plan.combined(arm, load):
        phases.append("cost")
    return [cell for part in phases for probe in ordered() if probe.phase == part
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
    # what a probe adds to the size line: what it assumed, what may come on top
    notes: tuple[str, ...] = ()


# for the size of the corpus before any tokenizer is at hand: English prose in the BPE
# vocabularies of current models
CHARS_PER_TOKEN = 4


def protocol_size(plan: Plan, corpus: Corpus, context: int | None = None) -> Size:
    """The whole plan's size; `context` defaults to the plan's max_model_len, else 8,192."""
    from servediff.probes.base import Work
    from servediff.schedule import schedule

    if context is None:
        given = plan.engine_options.get("max_model_len")
        context = given if isinstance(given, int) else 8192
    loads = schedule(plan)
    cells = [cell for arm, load, phase in loads for cell in cells_of_load(plan, arm, load, phase)]
    texts: Sequence[int] = [max(1, len(t.text) // CHARS_PER_TOKEN) for t in corpus.texts]
    work = sum((by_cell(c.probe).work(plan, texts, context, c) for c in cells), Work(0, 0, 0))
    notes = tuple(note for probe in ordered() if probe.enabled(plan)
                  and (note := probe.size_note(plan, context)))
    return Size(loads=len(loads), cells=len(cells), requests=work.requests,
                prompt_tokens=work.prompt_tokens, new_tokens=work.new_tokens, context=context,
                notes=notes)
