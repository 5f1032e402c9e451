"""The demo sized to a time budget: its grids cut, in a fixed order, until its
estimate fits.

The demo's estimate comes from rates this machine has just measured
(servediff.calibrate), so a machine that computes in float32, or an older one, gets a
smaller demo rather than a longer one. Every cut keeps every probe kind and what each
needs to say anything: two cold loads per arm for drift across loads, two cost loads of
three replicates for a noise band, one and two requests in flight, the sweep past the
context. The budget is the demo's whole time: the measurement of the rates comes out of
it first. The demo says which cuts it made and why; a run directory it resumes keeps the
plan it was locked with.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servediff.corpus import Corpus
from servediff.estimate import Estimate, Rates, estimate
from servediff.plan import Plan, resolve_plan
from servediff.probes import protocol_size

Raw = dict[str, Any]


def _set(*path: str, value: Any) -> Callable[[Raw], None]:
    def apply(raw: Raw) -> None:
        table = raw
        for key in path[:-1]:
            table = table.setdefault(key, {})
        table[path[-1]] = value
    return apply


@dataclass(frozen=True)
class Cut:
    says: str
    apply: Callable[[Raw], None]


def _shorter_prompts(raw: Raw) -> None:
    _set("probes", "speed", "prompt_tokens", value=[256])(raw)
    _set("probes", "prefix", "prefix_tokens", value=256)(raw)


# the built-in corpus: its short texts in order, then the five long ones
SHORT = ["prose-harbour", "prose-library", "prose-glacier", "prose-kitchen",
         "prose-night-shift", "prose-short-storm", "prose-essay-maps", "dialogue-shop",
         "dialogue-support", "dialogue-chat-temp", "dialogue-interview", "code-python-lru",
         "code-rust-parse", "code-sql-report", "code-bash-backup", "code-js-debounce",
         "code-c-ring", "json-config", "json-event", "json-api-response", "yaml-deploy",
         "maths-proof", "maths-latex", "maths-word", "maths-table", "list-packing",
         "list-changelog", "list-steps", "log-short", "csv-short", "de-prose-wetter",
         "de-dialog-bahnhof", "fr-prose-marche", "fr-instructions", "es-prose-pueblo",
         "ja-prose-eki", "zh-prose-cha", "ru-prose-zima", "url-mixed", "markdown-readme"]
LONG = ["log-server-long", "csv-benchmark-long", "json-records-long", "code-python-long",
        "prose-essay-long"]

# In the order they are made: the cheapest loss of information first.
CUTS: tuple[Cut, ...] = (
    Cut("combined loads: each cold load runs its drift, then its cost probes (4 engine "
        "starts, not 8)", _set("loads", value="combined")),
    Cut("speed: 16 generated tokens a request, not 32",
        _set("probes", "speed", "max_tokens", value=16)),
    Cut("concurrency: prompts of 128 and 256 tokens, not 128 and 512",
        _set("probes", "concurrency", "lengths", value=[128, 256])),
    Cut("corpus: 25 of its 45 texts, every other short one and the 5 long ones (where "
        "drift shows most)", _set("corpus", "tags", value=SHORT[::2] + LONG)),
    Cut("speed and prefix: 256-token prompts, not 512", _shorter_prompts),
    Cut("sweep: from 1,024 tokens to the context, not from 512",
        _set("probes", "sweep", "start", value=1024)),
    Cut("generate: 2 texts, not 4", _set("probes", "generate", "texts", value=2)),
    Cut("corpus: 13 texts, every fourth short one and 3 of the 5 long ones",
        _set("corpus", "tags", value=SHORT[::4] + LONG[::2])),
    Cut("sweep: the context and one past it only",
        _set("probes", "sweep", "start", value=2048)),
    Cut("concurrency: prompts of 128 tokens only, not 128 and 256",
        _set("probes", "concurrency", "lengths", value=[128])),
    Cut("speed: 8 generated tokens a request, not 16",
        _set("probes", "speed", "max_tokens", value=8)),
)


def fit(raw: Raw, budget_s: float, seconds: Callable[[Raw], float]
        ) -> tuple[Raw, list[str], float]:
    """The plan with the fewest cuts whose estimate (`seconds`) is within the budget, or
    with every cut; the cuts made, and its estimate."""
    plan = copy.deepcopy(raw)
    made: list[str] = []
    estimate = seconds(plan)
    for cut in CUTS:
        if estimate <= budget_s:
            break
        cut.apply(plan)
        made.append(cut.says)
        estimate = seconds(plan)
    return plan, made, estimate


@dataclass(frozen=True)
class Sized:
    """A plan cut to a budget: the rates and start it was sized with, its cuts, its
    estimate, and the seconds that measuring the rates took (out of the budget)."""

    plan: Plan
    corpus: Corpus
    measured: tuple[Rates, float]
    cuts: list[str]
    expected: float
    measuring_s: float = 0.0


def size_demo(raw: Raw, budget_s: float, base: Path, say: Callable[[str], None]) -> Sized:
    """The demo plan `raw` cut to `budget_s`, less the time the measurement takes, at the
    rates this machine measures now."""
    from servediff.calibrate import embedded_rates

    t0 = time.monotonic()
    plan, corpus = resolve_plan(raw, "demo.toml", base)
    measured = embedded_rates(plan, corpus, say)
    measuring_s = time.monotonic() - t0

    def seconds(sized: Raw) -> float:
        p, c = resolve_plan(sized, "demo.toml", base)
        found = estimate(p, protocol_size(p, c), base, measured)
        return found.seconds if isinstance(found, Estimate) else 0.0

    sized, cuts, expected = fit(raw, budget_s - measuring_s, seconds)
    plan, corpus = resolve_plan(sized, "demo.toml", base)
    return Sized(plan, corpus, measured, cuts, expected, measuring_s)
