"""A bisection step's verdict from its bundle, and a bisection judged again from its
bundles (`servediff rederive BISECT`): the analysis side of `servediff bisect`.

Each property is read from a step's bundle as the run's own analysis reads it, and
compared with the good end's (the first build that gave a value):
- `scores`: the per-text scores of the first load's score pass (or one named text's);
  a text moved as the plan's threshold says.
- `starts`: whether the engine started.
- `drift`: the arm's drift signature (no drift, or drift and in which scopes: across
  loads, repeats, batch sizes, concurrency, caches).
- `kv`: the KV pool the engine reported, the same within 1 % (the verdict's rule).
- `survival`: where single prompts stop surviving (the sweep's limit), or that they held
  to its longest length.
- `speed`: a speed metric (or every one the plan measures), at each prompt length and
  level, by the noise rule (a 95 % band of the difference that leaves out zero, and cost
  loads whose means do not overlap), past a relative change (`Rule.min_change`); a
  step the rule cannot decide (too few replicates, a busy machine) is a skip, named, not
  guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal, cast

from servediff.analysis.compare import TextScore, compare
from servediff.analysis.cost import speed_compare
from servediff.analysis.drift import did_not_start, scores_of
from servediff.analysis.findings import ArmCosts, ArmDrift, Metric, SpeedComparison, Summary
from servediff.analysis.summary import summarize
from servediff.analysis.verdict import kv_differs
from servediff.bisection import BISECT_FILE, Measure, Step, Verdict, bisect, read_bisection
from servediff.bundle import Evidence, read_evidence
from servediff.errors import InputError

Property = Literal["scores", "starts", "drift", "kv", "survival", "speed"]
PROPERTIES: dict[str, str] = {
    "scores": "per-text scores (the first load's score pass, against the good end's; "
              "--text: one text)",
    "starts": "whether the engine starts",
    "drift": "the drift signature (across loads, within a load, by batch and concurrency)",
    "kv": "the KV pool the engine reports (the same within 1 %)",
    "survival": "where single prompts stop surviving (the sweep's limit)",
    "speed": "a speed metric (--metric; default every one), by the noise rule, past "
             "--min-change",
}
# What the plot per build shows of each property.
UNITS: dict[str, str] = {
    "scores": "texts moved vs the good end", "starts": "engine started",
    "drift": "drift scopes", "kv": "KV tokens", "survival": "longest single prompt held",
    "speed": "largest speed change vs the good end",
}


@dataclass(frozen=True)
class Rule:
    """What narrows a property: for `scores`, the one text compared (`text`, a corpus tag;
    None: every text); for `speed`, the one metric (None: every metric) and the relative
    change it must pass beside the noise rule."""

    min_change: float = 0.1
    metric: Metric | None = None
    text: str | None = None


DEFAULT_RULE = Rule()


@dataclass
class Reading:
    """One step's bundle, and its analysis when a property needs it: the one the step's
    run derived, else made here once."""

    evidence: Evidence
    derived: Summary | None = None

    @cached_property
    def summary(self) -> Summary:
        return self.derived or summarize(self.evidence)

    @property
    def drift(self) -> ArmDrift | None:
        return next(iter(self.summary.arms.values()), None)

    @property
    def costs(self) -> ArmCosts | None:
        return next(iter(self.summary.costs.values()), None)


def first_scores(evidence: Evidence, text: str | None = None) -> dict[str, TextScore]:
    """The scores of a step's first load's score pass, of every text or of the one named
    (none: it gave none)."""
    cells = sorted((c for c in evidence.cells if c.probe == "score"), key=lambda c: c.load)
    scores = scores_of(cells[0]) if cells else {}
    return scores if text is None else {k: v for k, v in scores.items() if k == text}


def started(evidence: Evidence) -> tuple[bool, str]:
    """Whether a step's engine started, and the engine's refusal where it did not."""
    refused = did_not_start(evidence)
    if refused:
        return False, f"the engine did not start: {refused[0].message}"
    ready = any(x.seconds_to_ready is not None for rec in evidence.loads for x in rec.launches)
    return ready, "it started" if ready else "no launch became ready"


def value(prop: Property, r: Reading) -> tuple[str, float] | None:
    """A step's value of a property read alone (drift, kv, survival), in words and as the
    plot's number (None: the bundle has none)."""
    if prop == "drift":
        d = r.drift
        if d is None or d.signature.name == "not measured":
            return None
        scopes = sorted({f.scope for f in d.signature.findings})
        return ("no drift" if d.signature.stable else "drift: " + ", ".join(scopes),
                float(len(scopes)))
    costs = r.costs
    if prop == "kv":
        kv = costs.capacity.kv_tokens if costs else None
        return None if kv is None else (f"a KV pool of {kv:,} tokens", float(kv))
    s = costs.survival if costs else None
    if s is None or not s.points:
        return None
    if s.limit is not None:
        return (f"single prompts survive {s.limit.survives:,} tokens; {s.limit.outcome} "
                f"from {s.limit.fails_from:,}", float(s.limit.survives))
    held = s.largest_ok_length.get("1")
    failed = s.first_failure.get("1")
    if failed is not None:
        return (f"single prompts hold {held or 0:,} tokens; {failed.outcome} at "
                f"{failed.length:,}", float(held or 0))
    return f"single prompts hold every length to {held or 0:,}", float(held or 0)


def _where(x: SpeedComparison) -> str:
    return (f"{x.metric} at {x.prompt_tokens:,} tokens x{x.concurrency} "
            f"{(x.relative or 0.0):+.1%}")


def speed_verdict(ref: Reading, r: Reading, rule: Rule
                  ) -> tuple[Verdict, str, Measure]:
    """The step's speed against the good end's, metric by metric, by the noise rule."""
    ca, cb = ref.costs, r.costs
    min_change = rule.min_change
    rows = [x for x in speed_compare(ca.speed if ca else None, cb.speed if cb else None)
            if rule.metric in (None, x.metric)]
    up = started(r.evidence)[0]
    if not rows:
        return "skip", "no speed measured to compare", Measure(started=up)
    sized = [x for x in rows if x.relative is not None]
    top = max(sized, key=lambda x: abs(x.relative or 0.0), default=None)
    measure = Measure(started=up, value=_where(top) if top else None,
                      number=top.relative if top else None)
    changed = [x for x in rows if x.verdict in ("cost", "gain") and not x.busy
               and abs(x.relative or 0.0) >= min_change]
    if changed:
        return "bad", (f"{len(changed)} of {len(rows)} speed metrics changed past "
                       f"{min_change:.0%}: " + "; ".join(f"{_where(x)} ({x.verdict})"
                                                      for x in changed[:3])), measure
    undecided = [x for x in rows if x.verdict == "not enough replicates" or x.busy]
    if undecided:
        return "skip", (f"cannot decide: {len(undecided)} of {len(rows)} speed metrics have "
                        "too few replicates or were measured on a busy machine"), measure
    return "good", (f"every speed metric within noise or under {min_change:.0%} "
                    f"({len(rows)} compared)"), measure


def judged(evidence: Evidence, prop: Property, reference: Reading | None, threshold: float,
           rule: Rule = DEFAULT_RULE, derived: Summary | None = None
           ) -> tuple[Verdict, str, Reading | None, Measure]:
    """A measured build's verdict, why and what it measured, from its bundle (and its
    summary, where the step's run just derived it), and the good end's reading for the
    builds after it (the first build that gave a value sets it)."""
    up, why = started(evidence)
    if prop == "starts":
        return ("good" if up else "bad"), why, reference, Measure(started=up)
    r = Reading(evidence, derived)
    if prop == "scores":
        return _scores(r, reference, threshold, up, why, rule.text)
    if prop == "speed":
        if r.costs is None or r.costs.speed is None:
            return "skip", f"no speed measured: {why}", reference, Measure(started=up)
        if reference is None:
            return ("good", "the reference: its speed is what later builds are held to", r,
                    Measure(started=up, number=0.0))
        verdict, text, measure = speed_verdict(reference, r, rule)
        return verdict, text, reference, measure
    got = value(prop, r)
    if got is None:
        return "skip", f"nothing to compare: {why}", reference, Measure(started=up)
    words, number = got
    measure = Measure(started=up, value=words, number=number)
    if reference is None:
        return "good", f"the reference: {words}", r, measure
    ref = value(prop, reference)
    assert ref is not None  # the reference gave one
    differs = kv_differs(ref[1], number) if prop == "kv" else words != ref[0]
    return ("bad" if differs else "good"), (f"{words}, vs {ref[0]} at the good end" if differs
                                            else words), reference, measure


def _scores(r: Reading, reference: Reading | None, threshold: float, up: bool, why: str,
            text: str | None) -> tuple[Verdict, str, Reading | None, Measure]:
    scores = first_scores(r.evidence, text)
    if not scores:
        said = f"text {text!r} not scored" if text and up else why
        return "skip", f"no scores to compare: {said}", reference, Measure(started=up)
    if reference is None:  # the good end, measured first
        return ("good", f"the reference: {len(scores)} texts scored", r,
                Measure(started=up, compared=len(scores), moved=0, max_abs_dnll=0.0,
                        retokenized=0, number=0.0))
    found = compare(first_scores(reference.evidence, text), scores, threshold)
    measure = Measure(started=up, compared=found.compared, moved=found.moved,
                      max_abs_dnll=found.max_abs_delta, retokenized=len(found.ids_differ),
                      number=float(found.moved + len(found.ids_differ)))
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
    reference: Reading | None = None
    for step in found.steps:
        if step.bundle is None:
            again[step.build] = step  # did not build: nothing measured to judge again
            continue
        evidence = read_evidence(root / step.bundle)
        verdict, why, reference, measure = judged(evidence, prop, reference,
                                                  evidence.plan.thresholds.moved_abs_nll,
                                                  Rule(found.min_change, found.metric, found.text))
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
