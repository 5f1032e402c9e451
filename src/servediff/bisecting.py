"""`servediff bisect`: each build of a range measured as an arm, then bisected.

A step is the user's plan with one arm, its first, served by the build's command (the
engine adapter's `BuildSource`), run by the ordinary runner into `<out>/steps/<build>`
and kept as a bundle of its own (locked plan, raw rows, report). Its property is read
from that bundle (bisect_verdicts.py): the per-text scores of its first load, compared
with the good end's (`scores`), or whether the engine started (`starts`).
`bisection.bisect` chooses the builds; `<out>/bisect.json` holds the answer and every
step (bisect.md and bisect.html say it, with a plot of the property per build), and,
where it found a flip, which files of the engine's source changed between the
two builds around it (`<out>/flip.diff`: the diff of those that matter). A step whose
bundle is complete is read again, not measured again, so a bisection interrupted resumes
with the same command.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servediff import atomic
from servediff.bisect_verdicts import DEFAULT_RULE, PROPERTIES, Property, Reading, Rule, judged
from servediff.bisection import BISECT_FILE, Bisection, Step, bisect
from servediff.bundle import read_evidence
from servediff.context import Observer
from servediff.corpus import Corpus
from servediff.derived import write_bisection_report, write_derived
from servediff.engines import registry
from servediff.engines.builds import BuildFailed, BuildSource
from servediff.errors import InputError
from servediff.plan import Plan, read_plan_file, resolve_plan
from servediff.runner import Runner
from servediff.sourcediff import changes_text, compare_trees

# the probe a property is read from, where one is (the plan must keep it on)
NEEDS = {"speed": "speed", "survival": "sweep"}
# what a step's plan keeps of the user's plan: everything but how arms are made
ARM_TABLES = ("arms", "factors", "design", "comparisons", "ship", "confirmation",
              "cost_loads")


def step_plan(raw: dict[str, Any], plan: Plan, build: str, command: list[str], source: str,
              base: Path) -> tuple[Plan, Corpus]:
    """The plan that measures `build`: the user's plan with its first arm alone, named
    `build_<build>` (its other characters than letters, digits, `_` and `.` as `_`) and
    served by `command`."""
    first = next(iter(plan.arms.values()))
    arm = {**first.model_dump(mode="json", exclude_defaults=True, exclude={"factors"}),
           "command": command}
    step = {k: v for k, v in raw.items() if k not in ARM_TABLES}
    step["arms"] = {"build_" + re.sub(r"[^A-Za-z0-9_.]", "_", build)[:34]: arm}
    return resolve_plan(step, f"{source} (build {build})", base)


class Judge:
    """Measures one build and says good, bad or skip, against the good end's property."""

    def __init__(self, path: Path, prop: Property, root: Path, observer: Observer,
                 say: Callable[[str], None] = lambda line: None,
                 rule: Rule = DEFAULT_RULE) -> None:
        self.path, self.prop, self.root, self.observer = path, prop, root, observer
        self.rule = rule
        self.say = say
        self.raw = read_plan_file(path)
        self.plan, corpus = resolve_plan(self.raw, str(path), path.parent)
        if prop in NEEDS and NEEDS[prop] not in self.plan.probes.cost_probes():
            raise InputError(f"--property {prop}: {path} switches [probes.{NEEDS[prop]}] off, "
                             "and nothing else measures it")
        if prop == "speed" and self.plan.cost_loads_per_arm < 2:
            raise InputError(f"--property speed: the noise rule needs two cost loads a build "
                             f"at least; {path} has cost_loads_per_arm = "
                             f"{self.plan.cost_loads_per_arm}")
        tags = [t.tag for t in corpus.texts]
        if rule.text is not None and rule.text not in tags:
            raise InputError(f"--text {rule.text}: not a text of {path}'s corpus (its tags: "
                             f"{', '.join(tags[:12])}{' ...' if len(tags) > 12 else ''})")
        source = registry.create(self.plan.engine).builds()
        if source is None:
            raise InputError(f"{path}: engine {self.plan.engine!r} names no builds to bisect "
                             "(its adapter has no build source)")
        self.source = source
        self.reference: Reading | None = None

    def __call__(self, build: str) -> Step:
        self.say(f"build {build}: getting it (built or installed once, then cached)")
        t0 = time.monotonic()
        try:
            command = self.source.command(build)
        except BuildFailed as exc:
            return Step(build=build, verdict="skip", why=f"did not build: {exc}")
        self.say(f"build {build}: ready after {time.monotonic() - t0:.0f} s; measuring it")
        plan, corpus = step_plan(self.raw, self.plan, build, command, str(self.path),
                                 self.path.parent)
        root = self.root / "steps" / build
        Runner(plan, corpus, root, self.path.parent, self.observer).run()
        summary = write_derived(root)
        bundle = str(root.relative_to(self.root))
        evidence = read_evidence(root)
        verdict, why, self.reference, measure = judged(
            evidence, self.prop, self.reference, self.plan.thresholds.moved_abs_nll,
            self.rule, summary)
        return Step(build=build, verdict=verdict, why=why, bundle=bundle, measure=measure)


def run_bisection(path: Path, good: str, bad: str, prop: Property, root: Path,
                  observer: Observer, say: Callable[[str], None],
                  rule: Rule = DEFAULT_RULE) -> Bisection:
    """Bisect the builds from `good` to `bad` of the plan's engine; the answer is written
    to `<root>/bisect.json` after every step."""
    judge = Judge(path, prop, root, observer, say, rule)
    root.mkdir(parents=True, exist_ok=True)
    builds = judge.source.between(good, bad)
    say(f"bisecting {len(builds)} builds of {judge.plan.engine} from {good} to {bad} on "
        f"{PROPERTIES[prop]}: about {len(builds).bit_length() + 1} builds to measure")
    steps: list[Step] = []
    started = time.monotonic()

    def progress(step: Step, left: int) -> None:
        steps.append(step)
        # at the pace so far (a resumed step that is read again, not measured, counts too)
        pace = (time.monotonic() - started) / len(steps)
        eta = f", about {_minutes(pace * left)} at this pace" if left else ""
        say(f"[step {len(steps)}] build {step.build}: {step.verdict} ({step.why}); about "
            f"{left} more to measure{eta}")
        atomic.write_json(root / BISECT_FILE, {"property": prop, "builds": builds,
                                                  "steps": [s.model_dump() for s in steps],
                                                  "outcome": "running"})

    found = bisect(builds, prop, judge, progress).model_copy(
        update={"min_change": rule.min_change, "metric": rule.metric, "text": rule.text})
    if found.outcome == "found" and found.last_good and found.first_bad:
        found = with_changes(found, judge.source, root, say)
    atomic.write_json(root / BISECT_FILE, found.model_dump(mode="json"))
    write_bisection_report(root)
    return found


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def with_changes(found: Bisection, source: BuildSource, root: Path,
                 say: Callable[[str], None]) -> Bisection:
    """`found` with what changed in the engine's source from its last good build to its
    first bad one; the diff of the files that matter goes to `<root>/flip.diff`."""
    assert found.last_good and found.first_bad
    say(f"what changed from build {found.last_good} to {found.first_bad}: getting both "
        "sources")
    try:
        a, b = source.source(found.last_good), source.source(found.first_bad)
    except BuildFailed as exc:
        return found.model_copy(update={"changes_why": f"no source diff: {exc}"})
    changes, text = compare_trees(a, b, found.last_good, found.first_bad, source.aside)
    atomic.write_text(root / "flip.diff", text)
    changes = changes.model_copy(update={"diff": "flip.diff"})
    say(changes_text(changes))
    return found.model_copy(update={"changes": changes})
