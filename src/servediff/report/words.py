"""Every sentence servediff says about a run, from the typed findings alone.

Analysis stores kinds and numbers; this module is the one place they become
words, so the terminal, report.md, report.html and the evidence packet say
the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import singledispatch
from typing import Any, Generic, TypeVar

from servediff import probes
from servediff.analysis.findings import (
    ArmDrift,
    BatchSizeDrift,
    CacheArmsDrift,
    CacheSplitDrift,
    CapacityClaim,
    Claim,
    Comparison,
    ConcurrencyDrift,
    ControlDrift,
    CostLoadRefused,
    Coverage,
    DriftClaim,
    DriftFinding,
    FailedLaunch,
    FailureClaim,
    Finding,
    FirstRequestCached,
    Limit,
    LoadsDrift,
    LoadsMissing,
    Metric,
    OneCostLoad,
    OneRun,
    Pair,
    PlanGap,
    ProbeFindingClaim,
    ProbeOnSomeLoads,
    RefusedClaim,
    RepeatDrift,
    SharedShape,
    ShiftKind,
    Signature,
    SignatureClaim,
    SpeedClaim,
    SpeedSkipped,
    StartupClaim,
    StartupNotCompared,
    SurvivalClaim,
    SweepPointsMissing,
    SweepPointsShort,
    SweepPointView,
    TrendClaim,
)
from servediff.analysis.verdict import KV_SAME_WITHIN
from servediff.digits import num3
from servediff.evidence import RequestKind
from servediff.probes.base import Untested
from servediff.probes.speed import in_flight, levels_text

C = TypeVar("C", bound=Finding)

METRIC_NAMES: dict[Metric, str] = {"decode_tok_s": "decode tok/s",
                                   "prefill_tok_s": "prefill tok/s", "ttft_s": "TTFT (s)"}
KIND_NAMES: dict[RequestKind, str] = {"score": "scoring requests",
                                      "generate": "greedy generations"}

SIGNATURES = {
    "bit-identical": "every per-token logprob identical wherever it was compared: each pair "
                     "of cold loads, each repeat, batch size and concurrency level measured",
    "stable within threshold": "differences exist but none exceeds the plan's threshold",
    "across-load only": "stable within each load; moves between cold loads "
                        "(per-load kernel or autotune choice)",
    "within-load": "moves between repeats inside one load (batch composition, order, "
                   "non-deterministic kernels)",
    "not measured": "only one load and no repeat: nothing to compare",
    "across-load": "cold loads disagree (per-load kernel or autotune choice)",
    "batch-composition": "identical requests give different results when they share the "
                         "engine with others; alone they agree",
    "non-deterministic alone": "identical requests sent one at a time already disagree",
    "cache-dependent": "a result changes with whether its prefix came from the prefix cache "
                       "or was computed fresh",
}

SHIFTS: dict[ShiftKind, str] = {
    "no arm shift": "no arm shift",
    "arm shift": "arm shift",
    "arms differ and an arm drifts": "arms differ, and at least one arm also drifts by itself",
}

# What the "not tested" list calls what is not a probe of its own (probes: their title)
NOT_PROBES = {"capacity": "KV pool size and max concurrency"}
UNTESTED = {"disabled": "disabled in the plan",
            "external endpoint": "not run against an external endpoint",
            "no measurement": "no measurement completed",
            "not reported": "the engine reports none"}
FAILED = {"death": "the server died", "hang": "requests hung", "timeout": "requests timed out",
          "error": "an error response came"}
LIMIT_VERB = {"death": "dies", "hang": "hangs", "timeout": "times out", "error": "errors",
              "ok": "holds", "slow": "holds"}


# One sentence per kind of drift finding (singledispatch on its class, as for claims).
@singledispatch
def finding_text(f: Finding) -> str:
    raise TypeError(f"no words for a {type(f).__name__}")


@finding_text.register
def _(f: ControlDrift) -> str:
    return "non-deterministic alone (concurrency-1 control failed)"


@finding_text.register
def _(f: RepeatDrift) -> str:
    return "within-load"


@finding_text.register
def _(f: BatchSizeDrift) -> str:
    versus = f"scoring batch size {f.arm_batch_size} vs " + ", ".join(map(str, f.batch_sizes))
    return (f"batch-composition ({versus})" if f.control else
            f"batch-composition ({versus}; no same-size repeat as control)")


@finding_text.register
def _(f: ConcurrencyDrift) -> str:
    what = " and ".join(KIND_NAMES[k] for k in f.request_kinds)
    return f"batch-composition ({what} from {f.length} tokens at concurrency {f.level})"


@finding_text.register
def _(f: CacheArmsDrift) -> str:
    return (f"cache-dependent (prefix cache on; `{f.reference_arm}` with it off held "
            "still within its loads)")


@finding_text.register
def _(f: CacheSplitDrift) -> str:
    return (f"cache-dependent ({f.count} of {f.of} groups: responses served from the "
            "prefix cache differ from those computed fresh)")


@finding_text.register
def _(f: LoadsDrift) -> str:
    return "across-load only" if f.only else "across-load"


def finding_name(f: DriftFinding) -> str:
    """The signature part a finding is (a key of SIGNATURES)."""
    return "across-load only" if isinstance(f, LoadsDrift) and f.only else f.kind


def _parts(sig: Signature) -> list[tuple[str, str]]:
    """(name, text) of each part of a signature."""
    if sig.name != "drift":
        return [(sig.name, sig.name)]
    return [(finding_name(f), finding_text(f)) for f in sig.findings]


def and_list(items: list[str], word: str = "and") -> str:
    """a; a and b; a, b and c (or another joining word)."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def costs_of(found: Iterable[str], measured: Sequence[str]) -> str:
    """What an arm may cost, in words: the costs every run measures, then what each probe
    with a finding of its own (by section) compares ("speed, capacity, survival or prefix
    reuse")."""
    items = [*measured, *(probes.by_section(section).compares for section in found)]
    if len(items) == 1:
        return items[0]
    # an item with an "or" of its own needs the comma before the last one
    comma = "," if any(" or " in x for x in items) else ""
    return f"{', '.join(items[:-1])}{comma} or {items[-1]}"


def where_drift_starts(label: str, c: Comparison) -> list[str]:
    """The sentences on where a comparison's moved texts first differ, which engine size
    that points to and which shape they share, those that have something to say."""
    return [t for t in (first_moved_text(label, c), boundary_text(label, c),
                        shared_shape_text(label, c)) if t]


def first_moved_text(label: str, c: Comparison) -> str | None:
    """Where a comparison's moved texts first differ, in one sentence (None: not known)."""
    f = c.first_moved
    if f is None:
        return None
    few = "the moved text" if f.texts == 1 else f"all {f.texts} moved texts"
    if f.from_start == f.texts:
        return (f"{label}: {few} first differ at position 0: another kernel or path "
                "from the start")
    low, high = f"{f.min_fraction:.0%}", f"{f.max_fraction:.0%}"
    share = (low if low == high else f"{low} to {high}") + (
        " of its length" if f.texts == 1 else " of their lengths")
    span = (f"position {f.min:,} ({share})" if f.min == f.max
            else f"positions {f.min:,} to {f.max:,} (median {f.median:,.0f}; {share})")
    if f.from_start == 0 and f.min == f.max:
        # with an engine size there, the next sentence names it
        look = "" if c.boundary is not None else (
            ": a boundary there (a chunk, split or batch size) is the likely place to look")
        return f"{label}: {few} are identical up to {span}, where they first differ{look}"
    if f.from_start == 0:
        return (f"{label}: {few} are identical at first and differ from {span}: later than "
                "position 0, at no common position")
    return (f"{label}: {f.from_start} of {f.texts} moved texts first differ at position 0, "
            f"the others later (first differences from {span})")


def boundary_text(label: str, c: Comparison) -> str | None:
    """The engine size before which every moved text was identical, worded as the hint it
    is, with its evidence (None: no size fits, or none is known)."""
    b = c.boundary
    if b is None:
        return None
    return (f"{label}: every moved text is identical before position {b.tokens:,}, the "
            f"engine's {b.name} ({b.tokens:,} tokens): a hint that the texts moved where "
            f"the engine splits a prompt there, not a proven cause ({b.at_multiple} of "
            f"{b.texts} first differ exactly at a multiple of it; {b.longer_moved} of "
            f"{b.longer} texts longer than it moved, {b.shorter_moved} of {b.shorter} "
            "not longer)")


def shape_groups_text(shape: SharedShape, values: list[int]) -> str:
    """Groups of a shape fact: 'the 256- and 512-token compile buckets', 'the texts of 2
    or 3 chunks of 256 tokens (max_num_batched_tokens)'."""
    if shape.fact == "chunks":
        many = "" if values == [1] else "s"
        return (f"the texts of {and_list([f'{v:,}' for v in values], 'or')} chunk{many} of "
                f"{shape.size or 0:,} tokens, the engine's {shape.size_name}")
    few = "s" if len(values) > 1 else ""
    return (f"the {and_list([f'{v:,}' for v in values])}-token {shape.fact}{few}")


def shared_shape_text(label: str, c: Comparison) -> str | None:
    """Which shape the moved texts share, when the test names one (None: not tested, or
    nothing beyond chance)."""
    shape = c.shared_shape
    if shape is None or not shape.named:
        return None
    held = sum(g.moved for g in shape.groups if g.value in shape.named)
    size = sum(g.texts for g in shape.groups if g.value in shape.named)
    place = shape_groups_text(shape, shape.named)
    chunked = shape.fact == "chunks"
    how = (f"are exactly {place if chunked else 'those in ' + place}" if shape.exact else
           f"gather {'among' if chunked else 'in'} {place} ({held} of {size} there)")
    over = "the groups tried" + (f" and {shape.facts_tried} shape facts"
                                 if shape.facts_tried > 1 else "")
    return (f"{label}: the {c.moved} moved texts {how} (one-sided Fisher exact p = "
            f"{shape.p_adjusted:.2g}, corrected over {over})")


def signature_text(sig: Signature) -> str:
    return " + ".join(text for _, text in _parts(sig))


def signature_meaning(sig: Signature) -> str:
    return "; ".join(SIGNATURES[name] for name, _ in _parts(sig))


def caches_text(drift: ArmDrift) -> str:
    """What the arm's cold loads started with, and what that means for a stable verdict."""
    policy = drift.cache_policy
    if policy is None:
        return ""
    if policy == "fresh":
        empty = drift.caches_empty_at_start
        # a cache the plan keeps (compiled code: launch.keep_caches) is left out of the
        # policy; the summary does not say which, the load records do
        return ("every load started with new, empty JIT and autotune caches, apart from "
                "any the plan keeps (launch.keep_caches, named in each load's record)"
                + ("" if all(e is not False for e in empty) else
                   "; but at least one cache was not empty at start"))
    stable = drift.signature.stable
    if policy == "shared":
        return ("the loads shared their JIT and autotune caches (a warm restart)"
                + (": a kernel choice made once and cached would not show as drift here; "
                   "run the arm with cache_policy = \"fresh\" to see per-load choices"
                   if stable else ""))
    return ("the JIT and autotune caches were left as the environment had them"
            + (": a warm cache may have hidden per-load kernel choices" if stable else ""))


def shift_text(kind: ShiftKind) -> str:
    return SHIFTS[kind]


def _where(p: SweepPointView) -> str:
    return (f"the first {'prompt' if p.level == 1 else str(p.level) + ' concurrent prompts'}"
            f" of {p.length:,} tokens")


def failure_text(arm: str, p: SweepPointView) -> str:
    where = _where(p)
    if p.outcome == "death":
        how = p.signal or (f"exit code {p.returncode}" if p.returncode is not None else "exited")
        return f"`{arm}`: the server process died at {where} ({how})"
    if p.outcome == "hang":
        health = " while its health check still answered" if p.health_answered else ""
        return f"`{arm}`: requests hung (no answer, no work) at {where}{health}"
    if p.outcome == "timeout":
        return (f"`{arm}`: no answer at {where} within the bound, although the engine kept "
                "working")
    return f"`{arm}`: error response at {where} (HTTP {p.http_status})"


def limit_text(limit: Limit) -> str:
    """ "survives 1,472, dies from 1,536 (to 64 tokens)": the bisection's range."""
    width = (f"to {limit.resolution:,} tokens" if limit.resolved else
             f"not narrowed to {limit.resolution:,} tokens")
    return (f"survives {limit.survives:,}, {LIMIT_VERB[limit.outcome]} from "
            f"{limit.fails_from:,} tokens ({width})")


def survival_text(c: SurvivalClaim) -> str:
    """Where single prompts held, where they failed and how; what the sweep reached."""
    levels = f"levels {', '.join(str(x) for x in c.levels)}"
    if c.failure is not None and c.limit is not None:
        return (f"`{c.arm}`, single prompts: {limit_text(c.limit)}; longest that held "
                f"{c.largest_single or 0:,} tokens; {levels}")
    if c.failure is not None:
        held = f"up to {c.largest_single:,} tokens" if c.largest_single else "no length"
        return (f"`{c.arm}` survived single prompts {held}; at {c.failure.length:,} tokens "
                f"{FAILED[c.failure.outcome]}; {levels}")
    if c.largest_single is None:
        return f"`{c.arm}`: no single prompt was measured; {levels}"
    if c.reached_context and c.context_length:
        tail = f"every length measured, up to the context length ({c.context_length:,})"
    else:
        tail = f"every length measured, up to {c.largest_single:,} tokens" + (
            f" (the sweep did not reach the context length, {c.context_length:,})"
            if c.context_length else "")
    slowly = (f"; answers came after the request timeout from {c.slow_from:,} tokens"
              if c.slow_from else "")
    return f"`{c.arm}` survived {tail} as single prompts{slowly}; {levels}"


def _speed_text(c: SpeedClaim) -> str:
    row = c.comparison
    where = f"{METRIC_NAMES[row.metric]} at {row.prompt_tokens} prompt tokens" + (
        f", {row.concurrency} at once" if row.concurrency > 1 else "")
    if row.difference_band95 is None:
        return (f"{where}: not enough replicates for a noise band ({row.replicates[0]} and "
                f"{row.replicates[1]})")
    lo, hi = row.difference_band95
    rel = "" if row.relative is None else f" ({row.relative:+.1%})"
    band = f"95 % band of the difference [{num3(lo)}, {num3(hi)}]"
    size = f"`{c.arm}` {num3(row.mean_b)} vs `{c.baseline}` {num3(row.mean_a)}{rel}"
    if len(row.rooms) > 1:
        text = (f"{where}: {size}, measured on {len(row.rooms)} machines "
                f"({'; '.join(row.rooms)}): not a cost or a gain; measure both arms on one")
    elif row.busy:
        text = (f"{where}: {size}, measured on a busy machine ({len(row.busy)} of its cells, "
                f"e.g. {row.busy[0]}): not a cost or a gain; measure again on a quiet one")
    elif row.verdict == "within noise" and row.loads_overlap and not lo <= 0 <= hi:
        text = (f"{where}: {size}, within the noise between loads: the cost loads overlap "
                f"(means per load `{c.baseline}` {', '.join(map(num3, row.load_means[0]))}; "
                f"`{c.arm}` {', '.join(map(num3, row.load_means[1]))}), though the "
                f"replicates alone would not ({band})")
    elif row.verdict == "within noise":
        loads = (f" over {len(row.load_means[0])} and {len(row.load_means[1])} cost loads"
                 if all(row.load_means) and len(row.load_means) == 2 else "")
        text = f"{where}: {size}, within noise{loads} ({band})"
    else:
        text = f"{where}: {size}, a {row.verdict} outside the noise ({band})"
    if row.follows_order and row.order_difference is not None:
        text += (f"; the difference follows run order more than arm (cost loads that ran "
                 f"first minus those that ran last: {num3(row.order_difference)})")
    return text


def _capacity_text(c: CapacityClaim) -> str:
    a, b, va, vb = c.baseline, c.arm, c.value_a, c.value_b
    if c.what == "concurrency" and va and vb:
        text = f"maximum concurrency: `{b}` {num3(vb)} vs `{a}` {num3(va)}"
        if c.kind == "note":
            return text + f" ({vb / va - 1:+.1%}), the same within {KV_SAME_WITHIN:.0%}"
        return text + f" ({vb / va - 1:+.0%})"
    if not (va and vb):
        return f"KV pool reported for one arm only ({a}: {_known(va)}, {b}: {_known(vb)})"
    # a pool the same within KV_SAME_WITHIN but not equal shows the tenth that tells it
    near = c.kind == "note" and va != vb
    share = f"{vb / va - 1:+.1%}" if near else f"{vb / va - 1:+.0%}"
    text = f"KV pool: `{b}` {vb:,} vs `{a}` {va:,} tokens ({share})"
    if c.kind != "note":
        return text
    return text + (f", the same within {KV_SAME_WITHIN:.0%}" if near else ", the same")


def _known(x: float | None) -> str:
    return "not reported" if x is None else str(x)


def _startup_text(c: StartupClaim) -> str:
    s = c.comparison
    size = f"`{c.arm}` {s.mean_b:.1f} s vs `{c.baseline}` {s.mean_a:.1f} s"
    if len(s.rooms) > 1:
        return (f"start-up to ready: {size}, timed on {len(s.rooms)} machines "
                f"({'; '.join(s.rooms)}): not a cost or a gain; time both arms on one")
    if s.verdict == "within noise":
        return (f"start-up to ready: {size}, within noise "
                f"(band [{s.band95[0]:.1f}, {s.band95[1]:.1f}] s)")
    return f"start-up to ready: {size} ({s.mean_b / s.mean_a - 1:+.0%})"


SHOWN = ("cost", "gain", "within noise", "drift")


@dataclass(frozen=True)
class Said(Generic[C]):
    """What the report says of one claim class: its sentence, the regime it covers ("" where
    it states none) and the label it is listed under in the verdict (None: not listed)."""

    text: Callable[[C], str]
    regime: Callable[[C], str]
    label: Callable[[C], str | None]


def _no_regime(c: Finding) -> str:
    return ""


def _by_kind(c: Claim) -> str | None:
    """Costs, gains, within noise and drift are listed under their kind; the rest not."""
    return c.kind if c.kind in SHOWN else None


def _timed(c: SpeedClaim | StartupClaim) -> str | None:
    """Speed or start-up timed on more than one machine, or speed on a busy one, is listed
    as that, never as a plain cost or gain."""
    if len(c.comparison.rooms) > 1:
        return "two machines"
    if isinstance(c, SpeedClaim) and c.comparison.busy:
        return "busy machine"
    return _by_kind(c)


# One entry per claim class: a new claim class without its words fails loudly at the
# first report instead of falling through to another class's sentence.
SAID: dict[type[Finding], Said[Any]] = {}


def says(cls: type[C], text: Callable[[C], str], regime: Callable[[C], str] = _no_regime,
         label: Callable[[C], str | None] | None = None) -> None:
    """Register what the report says of a claim class (label: by its kind by default)."""
    SAID[cls] = Said[Any](text, regime, label or _by_kind)


def _said(c: Finding) -> Said[Any]:
    said = SAID.get(type(c))
    if said is None:
        raise TypeError(f"no words for a {type(c).__name__}")
    return said


def claim_text(c: Finding) -> str:
    return _said(c).text(c)


def claim_regime(c: Finding) -> str:
    """The regime a claim covers, in words ("" where it states none)."""
    return _said(c).regime(c)


def shown_kind(c: Claim) -> str | None:
    """The label a claim is listed under in the report's verdict, or None (not listed)."""
    return _said(c).label(c)


def _drift_text(c: DriftClaim) -> str:
    tail = (f" (max |dNLL| {c.max_abs_delta:.3g})" if c.moved else
            " (bit-identical)" if c.bit_identical else "")
    return (f"`{c.arm}` moved {c.moved} of {c.compared} texts between cold loads "
            f"{c.load_a} and {c.load_b}{tail}")


def _trend_text(c: TrendClaim) -> str:
    at_once = f", {c.trend.concurrency} at once" if c.trend.concurrency > 1 else ""
    return (f"`{c.arm}`: {METRIC_NAMES[c.trend.metric]} at {c.trend.prompt_tokens} tokens"
            f"{at_once} moved in one direction over every replicate "
            "(thermal or cache artefact?)")


def _failure_text(c: FailureClaim) -> str:
    tail = (" (both arms failed there)" if c.both_failed else
            f" (a gain for `{c.gain_for}`, which held there)" if c.gain_for else "")
    bound = f"; {limit_text(c.limit)}" if c.limit is not None else ""
    return failure_text(c.arm, c.point) + bound + tail


def _speed_regime(c: SpeedClaim) -> str:
    row = c.comparison
    if row.difference_band95 is None:
        return ""
    return (f"{row.prompt_tokens} prompt tokens, {in_flight(row.concurrency)}, "
            f"{row.replicates[0]}+{row.replicates[1]} replicates")


def _capacity_regime(c: CapacityClaim) -> str:
    if not (c.value_a and c.value_b):
        return ""
    return "as the engine reported it at start-up" if c.what == "kv" else \
        "as the engine reported it"


def _survival_regime(c: SurvivalClaim) -> str:
    return f"sweep lengths {c.lengths[0]:,}..{c.lengths[-1]:,}" if c.lengths else "sweep"


says(DriftClaim, _drift_text, lambda c: f"{c.compared} texts, teacher-forced")
says(SignatureClaim, lambda c: f"`{c.arm}` drift signature: {signature_text(c.signature)}",
     lambda c: "drift probes run")
says(SpeedClaim, _speed_text, _speed_regime, _timed)
says(TrendClaim, _trend_text)
says(CapacityClaim, _capacity_text, _capacity_regime)
says(FailureClaim, _failure_text, lambda c: f"sweep level {c.point.level}")
says(SurvivalClaim, survival_text, _survival_regime)
says(RefusedClaim, lambda c: refused_text(c.arm, c.message, c.launches))
says(StartupClaim, _startup_text,
     lambda c: f"{c.comparison.starts[0]}+{c.comparison.starts[1]} starts", _timed)
# a probe's own words, from its `compare`
says(ProbeFindingClaim, lambda c: c.text, lambda c: c.regime)


def refused_text(arm: str, message: str, launches: int) -> str:
    return (f"`{arm}` did not start: the engine refused it at all {launches} launches "
            f"(\"{message}\"); this configuration does not exist on this stack, and "
            "nothing of it was measured")


def coverage_text(c: Coverage) -> str:
    """The regime the cost claims cover, in one line."""
    parts = []
    if c.speed_lengths:
        parts.append(f"speed at {', '.join(str(n) for n in c.speed_lengths)} prompt tokens with "
                     f"{c.speed_max_tokens} output tokens, {levels_text(c.speed_levels)}")
    if c.sweep_top is not None:
        parts.append(f"prompts up to {c.sweep_top:,} tokens at concurrency "
                     f"{', '.join(str(x) for x in c.sweep_levels)}")
    parts += [words for section in c.probes if (words := probes.by_section(section).coverage)]
    if c.capacity:
        parts.append("KV capacity as reported")
    if c.drift_levels:
        parts.append(f"drift at concurrency {', '.join(str(x) for x in c.drift_levels)}")
    return "; ".join(parts) if parts else "no cost probe"


def headline(pair: Pair) -> str:
    found = [claim_text(c) for c in pair.claims if c.kind == "cost"]
    if pair.unmeasured:
        text = (f"`{pair.arm}` vs `{pair.baseline}`: nothing compared: "
                f"{and_list([f'`{a}`' for a in pair.unmeasured])} "
                f"{'has' if len(pair.unmeasured) == 1 else 'have'} no measured cell (the "
                "gaps say which loads)")
    elif found:
        text = (f"`{pair.arm}` vs `{pair.baseline}`: {len(found)} cost(s) found: "
                + "; ".join(found))
    elif coverage_text(pair.coverage) == "no cost probe":
        text = f"`{pair.arm}` vs `{pair.baseline}`: no cost measured"
    else:
        text = (f"`{pair.arm}` vs `{pair.baseline}`: no cost observed within "
                f"{coverage_text(pair.coverage)}")
    if pair.not_tested:
        text += f". Not tested: {', '.join(pair.not_tested)}"
    return text


def fix_text(pair: Pair) -> str | None:
    fix = pair.fix
    if fix is None:
        return None
    text = f"`{fix.fixed}` stopped the reload drift that `{fix.broken}` showed"
    if fix.fixed != pair.arm:
        return text
    costs = [claim_text(c) for c in pair.claims if c.kind == "cost"]
    if costs:
        return text + ", at these measured costs: " + "; ".join(costs)
    return text + ", with no cost observed within the regime covered"


def untested_text(name: str, why: Untested) -> str:
    title = NOT_PROBES.get(name) or probes.by_section(name).title
    return f"{title}: {UNTESTED[why.reason]}"


SOME_LOADS = {"repeat": "within-load repeats", "concurrency": "the concurrency grid"}


# One sentence per kind of gap (singledispatch on its class).
@singledispatch
def gap_text(g: Finding) -> str:
    raise TypeError(f"no words for a {type(g).__name__}")


PLAN_GAPS = {
    "external endpoint": "across-load drift: an external endpoint; servediff cannot reload a "
                         "server it did not start, so cold reloads were not compared",
    "one load": "across-load drift: one load per arm, so cold reloads were not compared",
    "no repeat": "within-load drift: no repeat probe was run",
}


@gap_text.register
def _(g: PlanGap) -> str:
    return PLAN_GAPS[g.kind]


@gap_text.register
def _(g: OneCostLoad) -> str:
    return ("speed noise between loads: one cost load per arm, so load-to-load noise was not "
            "estimated (the bands cover replicates in one load)")


@gap_text.register
def _(g: OneRun) -> str:
    return ("speed noise between runs: the bands cover this run's replicates and its cost "
            f"loads ({g.count} or more per arm), not a second run of the plan; on a shared "
            "machine a second run can call a small difference a cost, within noise or a gain "
            "where this one did not, so run the plan again before acting on one")


@gap_text.register
def _(g: ProbeOnSomeLoads) -> str:
    return (f"{SOME_LOADS.get(g.reason, g.reason)}: ran in {g.count} of {g.of} drift loads "
            "per arm (the plan's `loads`)")


@gap_text.register
def _(g: LoadsMissing) -> str:
    what = "cost loads have a cell" if g.kind == "cost loads missing" else \
        "loads have a score cell"
    return f"{g.arm}: {g.count} of {g.of} planned {what}"


def _load(phase: str, load: int) -> str:
    return f"{'cost load' if phase == 'cost' else 'load'} {load}"


@gap_text.register
def _(g: FirstRequestCached) -> str:
    return (f"{g.arm} {_load(g.phase, g.load)}: the first request after the start found "
            f"{g.count} cached prompt tokens; this load was not cold")


@gap_text.register
def _(g: CostLoadRefused) -> str:
    return (f"{g.arm} {_load(g.phase, g.load)}: not measured, the machine was not quiet "
            f"({g.reason}); run again on a quiet machine")


@gap_text.register
def _(g: SweepPointsMissing) -> str:
    return (f"{g.arm}: {g.count} sweep point(s) not measured (e.g. {g.length} tokens x "
            f"{g.level})")


@gap_text.register
def _(g: SweepPointsShort) -> str:
    return (f"{g.arm}: {g.count} sweep point(s) whose achieved prompt tokens are off the "
            f"nominal length by more than {g.tolerance:.0%}")


@gap_text.register
def _(g: SpeedSkipped) -> str:
    return f"{g.arm}: speed at {g.length} tokens: {g.reason}"


@gap_text.register
def _(g: StartupNotCompared) -> str:
    return (f"start-up to ready, `{g.arm}` vs the baseline: not compared; an arm has "
            f"{g.count} start(s), a noise band needs 3 each")


def failed_launch_text(f: FailedLaunch) -> str:
    load = f"{'cost load' if f.phase == 'cost' else 'load'} {f.load}"
    resume = ("; stopped at resume: its engine was still running after servediff ended"
              if f.found_alive else
              "; at resume its engine had already ended" if f.at_resume else "")
    return f"`{f.arm}` {load} attempt {f.attempt}: {f.error or 'died'}{resume}"


def request_kinds(kinds: list[RequestKind]) -> str:
    return " and ".join(KIND_NAMES[k] for k in kinds)
