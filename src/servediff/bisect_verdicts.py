"""A bisection step's verdict from its bundle, and a bisection judged again from its
bundles (`servediff rederive BISECT`): the analysis side of `servediff bisect`.

`scores`: the per-text scores of the step's first load, compared with those of the first
build that gave scores (the good end); a text moved as the plan's threshold says.
`starts`: whether the engine started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, cast

from servediff.analysis.compare import TextScore, compare
from servediff.analysis.drift import did_not_start, scores_of
from servediff.bisection import BISECT_FILE, Measure, Step, Verdict, bisect, read_bisection
from servediff.bundle import Evidence, read_evidence
from servediff.errors import InputError

Property = Literal["scores", "starts"]
PROPERTIES: dict[str, str] = {
    "scores": "per-text scores (the first load's score pass, against the good end's)",
    "starts": "whether the engine starts",
}


def first_scores(evidence: Evidence) -> dict[str, TextScore]:
    """The scores of a step's first load's score pass (none: it gave none)."""
    cells = sorted((c for c in evidence.cells if c.probe == "score"), key=lambda c: c.load)
    return scores_of(cells[0]) if cells else {}


def started(evidence: Evidence) -> tuple[bool, str]:
    """Whether a step's engine started, and the engine's refusal where it did not."""
    refused = did_not_start(evidence)
    if refused:
        return False, f"the engine did not start: {refused[0].message}"
    ready = any(x.seconds_to_ready is not None for rec in evidence.loads for x in rec.launches)
    return ready, "it started" if ready else "no launch became ready"


def judged(evidence: Evidence, prop: Property, reference: dict[str, TextScore] | None,
           threshold: float) -> tuple[Verdict, str, dict[str, TextScore] | None, Measure]:
    """A measured build's verdict, why and what it measured, from its bundle, and the
    reference scores for the builds after it (the first build that gave scores sets them:
    the good end)."""
    up, why = started(evidence)
    if prop == "starts":
        return ("good" if up else "bad"), why, reference, Measure(started=up)
    scores = first_scores(evidence)
    if not scores:
        return "skip", f"no scores to compare: {why}", reference, Measure(started=up)
    if reference is None:  # the good end, measured first
        return ("good", f"the reference: {len(scores)} texts scored", scores,
                Measure(started=up, compared=len(scores), moved=0, max_abs_dnll=0.0,
                        retokenized=0))
    found = compare(reference, scores, threshold)
    measure = Measure(started=up, compared=found.compared, moved=found.moved,
                      max_abs_dnll=found.max_abs_delta, retokenized=len(found.ids_differ))
    if found.moved or found.ids_differ:
        return "bad", (f"{found.moved} of {found.compared} texts moved (max |dNLL| "
                       f"{found.max_abs_delta:.3g} on {found.max_tag})" if found.moved else
                       f"{len(found.ids_differ)} texts tokenized otherwise"), reference, measure
    return "good", f"0 of {found.compared} texts moved", reference, measure


def rederived(root: Path) -> list[str]:
    """How the bisection in `root` differs when every verdict is judged again from its
    step's bundle and the search run again over them (empty: it re-derives)."""
    found = read_bisection(root)
    prop = cast(Property, found.property)
    again: dict[str, Step] = {}
    reference: dict[str, TextScore] | None = None
    for step in found.steps:
        if step.bundle is None:
            again[step.build] = step  # did not build: nothing measured to judge again
            continue
        evidence = read_evidence(root / step.bundle)
        verdict, why, reference, measure = judged(evidence, prop, reference,
                                                  evidence.plan.thresholds.moved_abs_nll)
        # a bisection of schema 2 kept no measure: its verdicts are judged again alone
        again[step.build] = Step(build=step.build, verdict=verdict, why=why,
                                 bundle=step.bundle,
                                 measure=measure if step.measure is not None else None)
    diffs = [f"step {s.build}: {s.verdict} ({s.why}) -> {again[s.build].verdict} "
             f"({again[s.build].why})" for s in found.steps if again[s.build] != s]

    def measured(build: str) -> Step:
        if build not in again:
            raise InputError(f"{root / BISECT_FILE}: the search asks for build {build}, "
                             "which the bisection did not measure")
        return again[build]

    answer = bisect(found.builds, prop, measured)
    keys = ("outcome", "last_good", "first_bad", "between", "why")
    diffs += [f"{k}: {getattr(found, k)!r} -> {getattr(answer, k)!r}" for k in keys
              if getattr(found, k) != getattr(answer, k)]
    return diffs
