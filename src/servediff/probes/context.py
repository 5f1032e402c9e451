"""What a probe measures with: the running engine, the texts as its token ids, and its cell.

A `ProbeContext` wraps one started `EngineLaunch` for the probes of a load:
the client and the arm's options, the corpus as the ids that are scored, the
prompt lengths that fit the engine's context, and a cell's start and finish
(its conditions read before and after, written atomically). Probes never
start, stop or record the engine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

from servediff.bundle import Layout
from servediff.context import Observer
from servediff.corpus import Corpus
from servediff.engines.base import EngineAdapter, EngineOptions
from servediff.engines.process import EngineHandle
from servediff.engines.transport import EngineClient
from servediff.errors import EngineStartError
from servediff.evidence import Cell, Skipped
from servediff.launch import EngineLaunch
from servediff.plan import Plan
from servediff.schedule import CellSpec


@dataclass
class ProbeContext:
    """One started launch, as the probes of its load see it."""

    started: EngineLaunch

    @property
    def plan(self) -> Plan:
        return self.started.plan

    @property
    def corpus(self) -> Corpus:
        return self.started.context.corpus

    @property
    def observer(self) -> Observer:
        return self.started.context.observer

    @property
    def layout(self) -> Layout:
        return self.started.context.layout

    @property
    def adapter(self) -> EngineAdapter:
        return self.started.adapter

    @property
    def options(self) -> EngineOptions:
        return self.started.options

    @property
    def proc(self) -> EngineHandle | None:
        """The engine's process (None: an external endpoint), to tell a death from an error."""
        return self.started.proc

    @property
    def attempt(self) -> int:
        """Which launch of its load this is (1 for the first)."""
        return self.started.launch.attempt

    @property
    def engine(self) -> EngineClient:
        assert self.started.client is not None, "the launch has not started"
        return self.started.client

    def client_for(self, timeout_s: float, give_up_s: float | None) -> EngineClient:
        return self.started.client_for(timeout_s, give_up_s)

    @property
    def context_length(self) -> int | None:
        info = self.started.info
        return info.max_model_len if info else None

    @property
    def prompt_limit(self) -> int | None:
        """The longest prompt the engine says it accepts, where it says (SGLang)."""
        info = self.started.info
        value = info.capacity.get("max_prompt_tokens") if info else None
        return int(value) if value else None

    @cached_property
    def scoring_prefix(self) -> tuple[list[int], str]:
        """The token put in front of every text (plan.scoring.prefix), and its label in the
        records."""
        prefix = self.plan.scoring.prefix
        if prefix == "none":
            return [], "none"
        if prefix == "bos":
            bos = self.started.bos_token_id
            if bos is None:
                raise EngineStartError(
                    "scoring.prefix = \"bos\" but neither the engine nor the model files "
                    "declare a BOS token; set scoring.prefix to \"none\" or a token id")
            return [bos], f"bos:{bos}"
        return [int(prefix)], f"id:{prefix}"

    @cached_property
    def ids(self) -> dict[str, list[int]]:
        """Every corpus text as the ids that are scored: the prefix, then its tokens."""
        head, _ = self.scoring_prefix
        return {t.tag: head + self.adapter.tokenize(self.engine, t.text, self.options)
                for t in self.corpus.texts}

    @cached_property
    def stream(self) -> list[int]:
        """The corpus as one token stream: what cost-probe prompts are cut from."""
        return self.adapter.tokenize(
            self.engine, "\n\n".join(t.text for t in self.corpus.texts), self.options)

    def fits(self, lengths: list[int], extra: int) -> tuple[list[int], list[Skipped]]:
        """The prompt lengths that leave room for `extra` generated tokens in the context
        the engine reports, and a skip record for each that does not."""
        context = self.context_length
        if context is None:
            return list(lengths), []
        fitting = [n for n in lengths if n + extra <= context]
        return fitting, [Skipped(length=n, reason=f"prompt + {extra} generated tokens exceed "
                                 f"the context of {context}")
                         for n in lengths if n + extra > context]

    def cell(self, spec: CellSpec, order: list[str] | None = None) -> Cell:
        """A new cell of this launch, its conditions read now; its clock starts now."""
        return Cell(arm=spec.arm, load=spec.load, phase=spec.phase, probe=spec.probe,
                    repeat=spec.repeat, batch_size=spec.batch_size, launch=self.attempt,
                    order=order or [],
                    started_at=time.time(), wall_seconds=0.0, engine_seconds=0.0,
                    conditions=self.started.conditions(), records=[],
                    context_length=self.context_length)

    def finish(self, cell: Cell, engine_seconds: float | None = None) -> None:
        """Close a cell's clock and write it."""
        cell.conditions_after = self.started.conditions()
        cell.wall_seconds = round(time.time() - cell.started_at, 6)
        cell.engine_seconds = round(cell.wall_seconds if engine_seconds is None
                                    else engine_seconds, 6)
        self.started.context.finish(cell)
