"""What a probe is to the runner: the cells it adds to a load, and how it measures one.

A probe module owns its cells (which ones a load has, in what order), its
skip rules and how a cell is built from what the engine answered. The runner
only walks the schedule and hands each cell to the probe registered under
the cell's probe name (`probes/__init__.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from servediff.evidence import Phase, ProbeName
from servediff.plan import Plan
from servediff.schedule import CellSpec
from servediff.session import LoadSession


@dataclass(frozen=True)
class Work:
    """What a cell asks of the engine: requests, prompt tokens sent, tokens generated."""

    requests: int
    prompt_tokens: int
    new_tokens: int

    def __add__(self, other: Work) -> Work:
        return Work(self.requests + other.requests, self.prompt_tokens + other.prompt_tokens,
                    self.new_tokens + other.new_tokens)


class Probe(ABC):
    # The probe names of the cells it measures (the score probe also measures its repeats
    # and batch-size passes), and the phase of load it runs in.
    names: ClassVar[tuple[ProbeName, ...]]
    phase: ClassVar[Phase]

    @abstractmethod
    def cells(self, plan: Plan, arm: str, load: int) -> list[CellSpec]:
        """The cells this probe adds to a load of this phase, in the order they run."""

    @abstractmethod
    def measure(self, session: LoadSession, cell: CellSpec) -> None:
        """Measure `cell` in the session's load and write it (or raise EngineError)."""

    @abstractmethod
    def work(self, plan: Plan, texts: Sequence[int], context: int, cell: CellSpec) -> Work:
        """About what `cell` asks of the engine, for a corpus of texts of about these token
        counts and an engine context of `context` tokens (known only once the engine runs:
        an assumption)."""
