"""A plan sized to a time budget: its grids cut, cheapest loss first, until its estimate
fits.

The cuts come from the plan itself: two of its own (combined loads, a smaller corpus) and
each enabled probe's, which its settings name (`ProbeSettings.cuts`); their ranks put
them in one order. Every cut keeps every probe and what each needs to say anything: the
cold loads per arm for drift across loads, the cost loads and replicates of a noise band,
the levels in flight, the sweep to the context and past it. The estimate comes from rates
this machine has just measured where the engine is the embedded one with the built-in
model (servediff.calibrate), so a machine that computes in float32, or an older one, gets
a smaller run rather than a longer one; from the reference rates otherwise. The budget is
the whole time: the measurement of the rates comes out of it first. The run says which
cuts it made and why; the lock holds the plan as cut, so a resumed run keeps it.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servediff.corpus import Corpus, load_corpus
from servediff.errors import PlanError
from servediff.estimate import Estimate, Rates, estimate
from servediff.plan import Plan, resolve_plan
from servediff.probes import protocol_size
from servediff.probes.settings import Cut, sections
from servediff.schedule import schedule

Raw = dict[str, Any]
# a text at least this many times the median text's length is a long one, where drift
# shows most: the built-in corpus's five of 1,000 tokens and more
LONG = 3


def _corpus_cuts(plan: Plan, corpus: Corpus) -> list[Cut]:
    """Every other short text and every long one, then every fourth short one and every
    other long one (by tag: a corpus names each text by one), where the plan takes the
    whole corpus and a quarter of it is 4 texts or more."""
    if plan.corpus.tags or plan.corpus.max_texts:
        return []
    texts = corpus.texts
    median = statistics.median(len(t.text) for t in texts)
    long = [t.tag for t in texts if len(t.text) >= LONG * median]
    short = [t.tag for t in texts if t.tag not in long]
    half, quarter = short[::2] + long, short[::4] + long[::2]
    if len(quarter) < 4:
        return []
    if not long:
        return [Cut(40, f"corpus: {len(half)} of its {len(texts)} texts, every other one",
                    {"tags": half}),
                Cut(80, f"corpus: {len(quarter)} texts, every fourth one", {"tags": quarter})]
    return [Cut(40, f"corpus: {len(half)} of its {len(texts)} texts, every other short one "
                    f"and the {len(long)} long ones (where drift shows most)", {"tags": half}),
            Cut(80, f"corpus: {len(quarter)} texts, every fourth short one and "
                    f"{len(long[::2])} of the {len(long)} long ones", {"tags": quarter})]


def _plan_cuts(plan: Plan, corpus: Corpus) -> list[tuple[Cut, tuple[str, ...]]]:
    """The plan's own cuts, and where their settings are."""
    made: list[tuple[Cut, tuple[str, ...]]] = []
    if plan.loads == "separate":
        combined = plan.model_copy(update={"loads": "combined"})
        starts, fewer = len(schedule(plan)), len(schedule(combined))
        if fewer < starts:
            made.append((Cut(10, "combined loads: each cold load runs its drift, then its "
                                 f"cost probes ({fewer} engine starts, not {starts})",
                             {"loads": "combined"}), ()))
    made += [(cut, ("corpus",)) for cut in _corpus_cuts(plan, corpus)]
    return made


def cuts(plan: Plan, corpus: Corpus) -> list[tuple[Cut, tuple[str, ...]]]:
    """Every cut a budget may make to `plan`, in the order they are made, each with the
    table its settings are in: the plan's own first, then each probe's in the registry's
    order, at one rank."""
    given = plan.engine_options.get("max_model_len")
    context = given if isinstance(given, int) else None
    made = _plan_cuts(plan, corpus)
    for settings in sections():
        spec = plan.probes.get(settings)
        if spec.on():
            made += [(cut, ("probes", settings.section)) for cut in spec.cuts(context)]
    return sorted(made, key=lambda pair: pair[0].rank)


def apply(raw: Raw, cut: Cut, table: tuple[str, ...]) -> None:
    """Set the cut's settings in the plan's raw tables."""
    for key in table:
        raw = raw.setdefault(key, {})
    raw.update(copy.deepcopy(cut.changes))


def fit(raw: Raw, made: list[tuple[Cut, tuple[str, ...]]], budget_s: float,
        seconds: Callable[[Raw], float]) -> tuple[Raw, list[str], float]:
    """The plan with the fewest of these cuts whose estimate (`seconds`) is within the
    budget, or with every cut the plan allows; the cuts made, and its estimate."""
    plan = copy.deepcopy(raw)
    says: list[str] = []
    expected = seconds(plan)
    for cut, table in made:
        if expected <= budget_s:
            break
        trial = copy.deepcopy(plan)
        apply(trial, cut, table)
        try:
            expected = seconds(trial)
        except PlanError:
            # a cut this plan refuses: combined loads where an arm serves its drift and
            # cost probes differently
            continue
        plan = trial
        says.append(cut.says)
    return plan, says, expected


@dataclass(frozen=True)
class Sized:
    """A plan cut to a budget: the rates and start it was sized with (None: the reference
    ones), its cuts, its estimate, and the seconds that measuring the rates took (out of
    the budget)."""

    plan: Plan
    corpus: Corpus
    measured: tuple[Rates, float] | None
    cuts: list[str]
    expected: float
    measuring_s: float = 0.0


def measures_here(plan: Plan) -> bool:
    """Whether the rates can be measured here before the run: the embedded engine with the
    built-in model (servediff.calibrate)."""
    return plan.engine == "transformers" and plan.model == "smollm2" and not plan.base_url


def size(raw: Raw, source: str, budget_s: float, base: Path,
         say: Callable[[str], None]) -> Sized:
    """The plan `raw` (read from `source`, relative to `base`) cut to `budget_s`, less the
    time the measurement takes, at the rates this machine measures now where it can."""
    t0 = time.monotonic()
    plan, corpus = resolve_plan(raw, source, base)
    measured = None
    if measures_here(plan):
        from servediff.calibrate import embedded_rates

        measured = embedded_rates(plan, corpus, say)
    measuring_s = time.monotonic() - t0
    # the corpus before any selection: the cuts choose among all its texts
    whole = load_corpus(base / plan.corpus.path if plan.corpus.path else None)

    def seconds(sized: Raw) -> float:
        p, c = resolve_plan(sized, source, base)
        found = estimate(p, protocol_size(p, c), base, measured)
        return found.seconds if isinstance(found, Estimate) else 0.0

    sized, made, expected = fit(raw, cuts(plan, whole), budget_s - measuring_s, seconds)
    plan, corpus = resolve_plan(sized, source, base)
    return Sized(plan, corpus, measured, made, expected, measuring_s)
