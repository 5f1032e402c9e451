"""A toy probe added the way any probe is: this one file plus its registry line.

`Tokenize` asks the engine to tokenize the same text `requests` times per
load and keeps each answer's hash and latency as the cell's own rows; its
finding is, per arm, how many distinct tokenizations came back. It has its
settings, description, cells, measurement, analysis, report lines and its
claim (an arm with more distinct tokenizations than its baseline: a cost, which
the verdict and What to ship list with the others) here and nowhere else.
tests/integration/test_toy_probe.py registers it and runs a plan with it on a
real engine process.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from servediff.bundle import Layout
from servediff.errors import EngineError
from servediff.evidence import Cell, Raw
from servediff.plan import Plan
from servediff.probes.base import Probe, ProbeClaim, ProbeFinding, Work, add_row, rows
from servediff.probes.settings import ProbeSettings
from servediff.schedule import CellSpec

if TYPE_CHECKING:
    from servediff.probes.context import ProbeContext

ENTRY = "tests.probes.toy:Tokenize"
TEXT = "The toy probe tokenizes this sentence again and again."


class TokenizeSettings(ProbeSettings):
    """The same text tokenized `requests` times in every drift load."""

    section = "tokenize"
    phase = "drift"

    enabled: bool = False
    requests: Annotated[int, Field(ge=1, le=100)] = 3


class TokenizeRow(Raw):
    """One request: its index, and the answer's hash and latency or the error."""

    index: int
    seconds: float | None = None
    hash: str | None = None
    error: str | None = None


class ArmTokenize(ProbeFinding):
    requests: int
    errors: int
    distinct: int
    cells: list[str]


class TokenizeFinding(ProbeFinding):
    arms: dict[str, ArmTokenize]


class Tokenize(Probe[TokenizeSettings]):
    settings = TokenizeSettings
    names = ("tokenize",)
    description = "one text tokenized again and again: does the engine's tokenizer answer alike?"
    title = "tokenizer answers to one text, repeated"
    finding = TokenizeFinding

    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        return [CellSpec(arm, load, "tokenize", 0)] if self.enabled(plan) else []

    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        spec = self.spec(plan)
        return Work(requests=spec.requests, prompt_tokens=0, new_tokens=0)

    def protocol(self, spec: TokenizeSettings) -> str | None:
        return f"tokenize one text {spec.requests} times per drift load"

    def measure(self, ctx: ProbeContext, cell: CellSpec) -> None:
        spec = self.spec(ctx.plan)
        ctx.observer.cell_starting(cell.name, spec.requests)
        out = ctx.cell(cell)
        for index in range(spec.requests):
            t0 = time.monotonic()
            try:
                ids = ctx.adapter.tokenize(ctx.engine, TEXT, ctx.options)
            except EngineError as exc:
                add_row(out, TokenizeRow(index=index, error=str(exc)))
                continue
            add_row(out, TokenizeRow(index=index, seconds=round(time.monotonic() - t0, 6),
                                     hash=hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]))
            ctx.observer.cell_advanced(index + 1)
        ctx.finish(out)

    def analyse(self, plan: Plan, cells: Sequence[Cell]) -> TokenizeFinding | None:
        arms: dict[str, ArmTokenize] = {}
        for arm in plan.arms:
            mine = [c for c in cells if c.arm == arm]
            got = [row for c in mine for row in rows(c, TokenizeRow)]
            if got:
                arms[arm] = ArmTokenize(
                    requests=len(got), errors=sum(r.error is not None for r in got),
                    distinct=len({r.hash for r in got if r.hash is not None}),
                    cells=[Layout.cell_ref(c.name) for c in mine])
        return TokenizeFinding(arms=arms) if arms else None

    def compare(self, finding: ProbeFinding, baseline: str, arm: str) -> list[ProbeClaim]:
        found = TokenizeFinding.model_validate(finding)
        a, b = found.arms.get(baseline), found.arms.get(arm)
        if a is None or b is None:
            return []
        kind: Literal["cost", "gain", "within noise"] = (
            "cost" if b.distinct > a.distinct else "gain" if b.distinct < a.distinct
            else "within noise")
        return [ProbeClaim(kind=kind, text=(
            f"`{arm}` gave {b.distinct} distinct tokenization(s) of one text over "
            f"{b.requests} request(s), `{baseline}` {a.distinct}"), evidence=[*a.cells, *b.cells])]

    def report(self, finding: ProbeFinding) -> list[str]:
        found = TokenizeFinding.model_validate(finding)
        return [f"- `{arm}`: {a.distinct} distinct tokenization(s) over {a.requests} "
                f"request(s), {a.errors} error(s)" for arm, a in found.arms.items()]
