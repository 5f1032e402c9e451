"""What a probe is: its settings, the cells it adds to a load, how it measures and reads one.

A probe module owns everything of one probe: its settings model (the plan's
`[probes.<section>]` table), its cells (which ones a load has, in what
order), its skip rules, how a cell is built from what the engine answered,
its one-line description, and, for a probe whose analysis is its own, the
finding it derives from its cells and how the report says it. The registry
(`probes/__init__.py`) names the modules; the plan, the schedule, the
summary, `servediff init` and the report ask it and never list the probes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from servediff.evidence import Cell, Phase
from servediff.probes.settings import ProbeSettings
from servediff.schedule import CellSpec

if TYPE_CHECKING:
    from servediff.plan import Plan
    from servediff.probes.context import ProbeContext


@dataclass(frozen=True)
class Work:
    """What a cell asks of the engine: requests, prompt tokens sent, tokens generated."""

    requests: int
    prompt_tokens: int
    new_tokens: int

    def __add__(self, other: Work) -> Work:
        return Work(self.requests + other.requests, self.prompt_tokens + other.prompt_tokens,
                    self.new_tokens + other.new_tokens)


@dataclass(frozen=True)
class Measured:
    """A run's cells, for a probe to say whether it measured anything: the complete ones,
    and those an engine's death or an interrupt left partial."""

    cells: Sequence[Cell]
    partial: Sequence[Cell] = ()


class Untested(BaseModel):
    """Why a run did not measure a probe (summary.json's `untested`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: Literal["disabled", "external endpoint", "no measurement", "not reported"]


class ProbeFinding(BaseModel):
    """The base of a probe's own finding (summary.json's `probe_findings`, under the probe's
    section): a probe with one subclasses it, names the subclass as its `finding`, and
    summary.json reads it back as that class."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ProbeClaim(BaseModel):
    """What a probe with a finding of its own says about one arm against its baseline: a
    cost, a gain, within noise or a note, in the probe's own words, with the files behind
    it. The verdict lists it with the other claims of the pair, and a cost counts in What
    to ship as any other."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["cost", "gain", "within noise", "note"]
    text: str
    evidence: list[str] = []
    # the regime it covers, in words ("": it states none), shown beside it in the verdict
    regime: str = ""
    # what it compares is something the server can or cannot do (reuse a prefix, hold a
    # prompt), not how fast: a cost of it weighs in What to ship before the number of
    # factors does
    severe: bool = False
    # False: neither arm gave anything to compare (the factor attribution counts the
    # property as not measured); True: a note says the two are the same
    compared: bool = True


S = TypeVar("S", bound=ProbeSettings)
R = TypeVar("R", bound=BaseModel)


def rows(cell: Cell, model: type[R]) -> list[R]:
    """A cell's own rows (`Cell.data`) read back as the probe's row model."""
    return [model.model_validate(row) for row in cell.data]


def add_row(cell: Cell, row: BaseModel) -> None:
    """Keep one row of the probe's own model in the cell (`Cell.data`)."""
    cell.data.append(row.model_dump(mode="json"))


class Probe(ABC, Generic[S]):
    """One pluggable probe: what it adds to a load, how it measures, how it is read back."""

    # Its settings model (whose `section` names the probe in the plan and the registry,
    # and whose `phase` is the phase of load it runs in), the probe names of the cells it
    # measures (the repeat probe also measures its repeats and batch-size passes), one line
    # for `servediff init` and what the report's "not tested" list calls it.
    settings: ClassVar[type[ProbeSettings]]
    names: ClassVar[tuple[str, ...]]
    description: ClassVar[str]
    title: ClassVar[str]
    # What the factor attribution and What to ship call the property its claims compare
    # (None: the title), and what the verdict's coverage line says it covered (None:
    # nothing), where a finding of its own exists.
    property_name: ClassVar[str | None] = None
    coverage: ClassVar[str | None] = None
    # The model of the finding `analyse` returns (None: the probe has none of its own).
    finding: ClassVar[type[ProbeFinding] | None] = None

    @property
    def section(self) -> str:
        return self.settings.section

    @property
    def compares(self) -> str:
        """What its claims compare, in the attribution's and the packet's words."""
        return self.property_name or self.title

    @property
    def phase(self) -> Phase:
        return self.settings.phase

    def spec(self, plan: Plan) -> S:
        """This probe's settings in `plan`."""
        return cast(S, plan.probes.get(self.settings))

    def enabled(self, plan: Plan) -> bool:
        return self.spec(plan).on()

    @abstractmethod
    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        """The cells this probe adds to a load of its phase, in the order they run."""

    @abstractmethod
    def measure(self, ctx: ProbeContext, cell: CellSpec) -> None:
        """Measure `cell` on the context's engine and write it (or raise EngineError)."""

    @abstractmethod
    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        """About what `cell` asks of the engine, for a corpus of texts of about these token
        counts and an engine context of `context` tokens (known only once the engine runs:
        an assumption)."""

    def size_note(self, plan: Plan, context: int) -> str | None:
        """What the size announced before a run should add for this probe: what it assumed
        or what may come on top (None: nothing)."""
        return None

    # --- analysis and report: for the summary's "not tested" list and a probe's own
    # finding (the built-in probes' findings are the drift and cost analyses') -----------

    def measured(self, found: Measured) -> bool:
        """Whether the run measured this probe: by default, a cell of it exists."""
        return any(c.probe in self.names for c in found.cells)

    def untested(self, plan: Plan, found: Measured) -> Untested | None:
        """Why the run did not measure this probe (None: it did)."""
        if not self.enabled(plan):
            return Untested(reason="disabled")
        if self.phase == "cost" and plan.base_url:
            return Untested(reason="external endpoint")
        if not self.measured(found):
            return Untested(reason="no measurement")
        return None

    def protocol(self, spec: S) -> str | None:
        """The report's words for what these settings let the probe see (None: nothing to
        say)."""
        return None

    def analyse(self, plan: Plan, cells: Sequence[Cell]) -> ProbeFinding | None:
        """This probe's own finding from its cells, an instance of `finding` (None: it has
        none of its own)."""
        return None

    def read(self, stored: object) -> ProbeFinding:
        """The finding as summary.json stores it, read back as this probe's `finding`."""
        if self.finding is None:
            raise ValueError(f"probe_findings.{self.section}: the probe {self.section!r} has "
                             "no finding of its own")
        return self.finding.model_validate(stored)

    def report(self, finding: ProbeFinding) -> list[str]:
        """The report's lines (markdown) for the finding `analyse` returned."""
        return []

    def compare(self, finding: ProbeFinding, baseline: str, arm: str) -> list[ProbeClaim]:
        """What the finding says of `arm` against `baseline`, for the verdict, the factor
        attribution and What to ship (none: the finding stays in its own section of the
        report)."""
        return []
