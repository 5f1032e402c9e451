"""Greedy generations compared: where repeated or reloaded generations diverge."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servediff.analysis.findings.base import Band, Finding
from servediff.analysis.findings.concurrency import CacheSplit


class Divergence(Finding):
    tag: str
    first_position: int
    differs_in: Literal["tokens", "logprobs only"]
    a_continuation: list[int]
    b_continuation: list[int]
    a_text: str
    b_text: str


class GenerationComparison(Finding):
    prompts: int
    diverged: int
    diverged_ci95: Band | None
    divergences: list[Divergence]


class LoadGeneration(GenerationComparison):
    load: int


class LoadPairGeneration(GenerationComparison):
    load_a: int
    load_b: int


class ArmPairGeneration(GenerationComparison):
    arm_a: str
    arm_b: str


class ArmGeneration(Finding):
    within_load: list[LoadGeneration]
    across_load: list[LoadPairGeneration]
    cache_splits: list[CacheSplit]
    cells: list[str] = Field(default_factory=list)
