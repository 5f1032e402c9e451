"""Which build changed it: the search over an engine's builds, and what it found.

A bisection is given an ordered list of builds (oldest first) and a judge that measures
one build and says whether its property is the good end's ("good"), differs ("bad"), or
cannot be measured ("skip": the build did not build or install, as `git bisect skip`).
It measures both ends first and goes on only when they flip: the good end good, the bad
end bad. Then it halves the range between the last good and the first bad build,
passing over skipped builds to their nearest untested neighbour, until no untested build
is left between them. The answer names the last good build, the first bad one, and the
skipped builds between them, where those leave the answer a range: O(log n) builds are
measured, each with its own bundle. Builds (tags, releases) are as fine as it goes;
commits between two builds are the user's to bisect, and the answer says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from servediff.errors import InputError
from servediff.sourcediff import SourceChanges

Verdict = Literal["good", "bad", "skip"]


class Measure(BaseModel):
    """What a step measured of its property, for the report and its plot per build:
    whether the engine started; for scores, the texts compared with the good end's, how
    many moved and the largest |dNLL| among them; for the others, the value in words and
    as a number (None: not measured)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    started: bool
    compared: int | None = None
    moved: int | None = None
    max_abs_dnll: float | None = None
    # texts whose token ids differ from the good end's (not compared by score)
    retokenized: int | None = None
    value: str | None = None
    number: float | None = None


class Step(BaseModel):
    """One build measured: its verdict, why, the bundle of its run (None: none, a build
    that did not build) and what it measured (None: nothing, or a bisection of schema 2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    build: str
    verdict: Verdict
    why: str
    bundle: str | None = None
    measure: Measure | None = None


class Bisection(BaseModel):
    """What a bisection found (bisect.json): the builds of the range, each step in the
    order measured, and the answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 2: the source changes at the flip (changes, changes_why); 3: each step's measure
    schema_version: int = 3
    property: str
    builds: list[str]
    steps: list[Step]
    # "found": last_good and first_bad are neighbours, or only skipped builds lie between
    # them; "no flip": the ends do not flip (good end not good, or bad end not bad)
    outcome: Literal["found", "no flip"]
    last_good: str | None = None
    first_bad: str | None = None
    # skipped builds between last_good and first_bad: the first bad build is one of these
    # or first_bad
    between: list[str] = []
    why: str = ""
    # what changed in the engine's source from last_good to first_bad (None: not found,
    # or the sources could not be had: `changes_why` says why)
    changes: SourceChanges | None = None
    changes_why: str = ""
    # property `speed`: the relative change a metric must pass to count, and the one
    # metric bisected (None: every one)
    min_change: float = 0.1
    metric: Literal["decode_tok_s", "prefill_tok_s", "ttft_s"] | None = None
    # property `scores`: the one text compared (a corpus tag; None: every text)
    text: str | None = None


def bisect(builds: Sequence[str], prop: str, judge: Callable[[str], Step],
           progress: Callable[[Step, int], None] = lambda step, left: None) -> Bisection:
    """The first build of `builds` whose property differs from the first build's, by
    `judge`; `progress` hears each step and about how many builds are left to measure."""
    if len(builds) < 2:
        raise ValueError(f"a bisection needs two builds at least, got {list(builds)}")
    steps: list[Step] = []
    verdicts: dict[int, Verdict] = {}

    def measure(i: int) -> Verdict:
        step = judge(builds[i])
        steps.append(step)
        verdicts[i] = step.verdict
        progress(step, _left(lo, hi, verdicts))
        return step.verdict

    lo, hi = 0, len(builds) - 1
    for end, wanted in ((lo, "good"), (hi, "bad")):
        if (got := measure(end)) != wanted:
            why = (f"the {wanted} end, build {builds[end]}, is {got} "
                   f"({steps[-1].why}): no flip to bisect")
            return Bisection(property=prop, builds=list(builds), steps=steps,
                             outcome="no flip", why=why)
    while (i := _next(lo, hi, verdicts)) is not None:
        got = measure(i)
        if got == "good":
            lo = i
        elif got == "bad":
            hi = i
    between = [builds[i] for i in range(lo + 1, hi)]
    why = (f"build {builds[hi]} is the first that differs from build {builds[0]} in {prop}"
           if not between else
           f"the first build that differs from build {builds[0]} in {prop} is one of "
           f"{', '.join(between)} (not measurable) or {builds[hi]}")
    return Bisection(property=prop, builds=list(builds), steps=steps, outcome="found",
                     last_good=builds[lo], first_bad=builds[hi], between=between,
                     why=why + "; commits between two builds are not bisected")


def _next(lo: int, hi: int, verdicts: dict[int, Verdict]) -> int | None:
    """The untested build nearest the middle of (lo, hi), or None when none is left."""
    untested = [i for i in range(lo + 1, hi) if i not in verdicts]
    if not untested:
        return None
    middle = (lo + hi) / 2
    return min(untested, key=lambda i: (abs(i - middle), i))


def _left(lo: int, hi: int, verdicts: dict[int, Verdict]) -> int:
    """About how many more builds a bisection of (lo, hi) measures: log2 of the range."""
    untested = sum(1 for i in range(lo + 1, hi) if i not in verdicts)
    return untested.bit_length()


BISECT_FILE = "bisect.json"


def read_bisection(root: Path) -> Bisection:
    """The bisection `servediff bisect` wrote into `root` (its bisect.json)."""
    path = root / BISECT_FILE
    try:
        return Bisection.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a bisection servediff wrote ({exc})") from None
