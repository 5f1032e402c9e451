"""Comparisons of per-text scores: which texts moved, where they first differ, and the
shapes behind them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servediff.analysis.findings.base import Band, Finding


class MovedText(Finding):
    """Where a moved text's per-token logprobs first differ. Positions count scored
    tokens: 0 is the logprob of the text's second token given its first."""

    tag: str
    # scored positions in the text, and the first one whose logprob differs (None: the
    # per-token logprobs were not stored, or they are equal and only the sum moved)
    length: int
    first: int | None
    # how many positions differ, and the largest per-token |difference| (nats)
    differing: int
    max_abs: float


class FirstMoved(Finding):
    """The distribution of first-moved positions over a comparison's moved texts, as
    positions and as fractions of each text's length."""

    texts: int
    # how many moved texts differ from position 0 (another kernel from the start)
    from_start: int
    min: int
    median: float
    max: int
    min_fraction: float
    median_fraction: float
    max_fraction: float


class ShapeGroup(Finding):
    """The compared texts in one group of a shape fact: how many, how many moved, and
    the corrected one-sided Fisher p that the group holds more moved texts than chance."""

    value: int
    texts: int
    moved: int
    p_adjusted: float


class SharedShape(Finding):
    """Whether the moved texts share a shape: the compared texts grouped by `fact`, the
    shape fact that separated them best of the `facts_tried`. `length bucket`: the power
    of two at or above the text's token count; `compile bucket`: the bucket a compiled
    engine pads the text to (powers of two from its smallest); `chunks`: how many pieces
    of `size` tokens (the engine's `size_name`) the text is computed in. `named`: the
    values whose groups hold the moved texts beyond chance (corrected p < 0.05); `exact`:
    whether the moved texts are exactly the texts of the named groups."""

    fact: Literal["length bucket", "compile bucket", "chunks"]
    size_name: str | None = None
    size: int | None = None
    facts_tried: int = 1
    groups: list[ShapeGroup]
    named: list[int]
    exact: bool
    # the corrected p of the named groups taken together, corrected over the facts tried
    # too (None: none named)
    p_adjusted: float | None


class BoundaryHint(Finding):
    """A size the engine computes a long prompt in (its own name for it, and `tokens`)
    before which every moved text was still identical: the likely boundary, a hint. The
    evidence: of the `texts` moved texts whose positions are known, how many first differ
    exactly at a multiple of it; of the compared texts longer (more scored positions) and
    not longer than it, how many moved."""

    name: str
    tokens: int
    texts: int
    at_multiple: int
    longer: int
    longer_moved: int
    shorter: int
    shorter_moved: int


class Comparison(Finding):
    """b minus a over the texts both scored with the same ids."""

    compared: int
    moved: int
    moved_tags: list[str]
    # exact 95 % interval of the rate behind moved / compared
    moved_ci95: Band | None
    max_abs_delta: float
    max_tag: str | None
    mean_delta: float
    bit_identical: bool
    ids_differ: list[str] = Field(default_factory=list)
    only_a: list[str] = Field(default_factory=list)
    only_b: list[str] = Field(default_factory=list)
    # b - a per compared text
    deltas: dict[str, float] = Field(default_factory=dict)
    # per moved text, where its logprobs first differ (schema 8), and their distribution
    moved_texts: list[MovedText] = Field(default_factory=list)
    first_moved: FirstMoved | None = None
    # which shape the moved texts share (None: nothing moved, everything did, or the
    # compared texts fall in one group)
    shared_shape: SharedShape | None = None
    # the engine size at or before which every moved text was still identical (None:
    # none, or the run knows no sizes of the engine)
    boundary: BoundaryHint | None = None


class LoadPair(Comparison):
    load_a: int
    load_b: int


class RepeatPair(Comparison):
    load: int
    repeat: int


class BatchPair(Comparison):
    load: int
    batch_size: int
    arm_batch_size: int | None


class SkippedRepeat(Finding):
    load: int
    repeat: int
    reason: Literal["different launches"]


class Discordant(Finding):
    """Texts that moved between cold loads under one arm only (paired on texts)."""

    texts: int
    moved_in_a_only: int
    moved_in_b_only: int
    mcnemar_p: float | None


ShiftKind = Literal["no arm shift", "arm shift", "arms differ and an arm drifts"]


class ArmPair(Comparison):
    arm_a: str
    arm_b: str
    load_a: int
    load_b: int
    signature: ShiftKind
    reload_discordant: Discordant


class LoadRow(Finding):
    load: int
    launch: int
    texts: int
    ok: int
    invalid: int
    errors: int
    tokens_scored: int
    sum_nll: float
    perplexity: float | None
