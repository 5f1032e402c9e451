"""The shapes an engine computes a prompt in, as its launch records them, and whether
the moved texts of a comparison first differ at or past one of its sizes.

An engine that splits a long prompt computes the logits of its first `size` tokens in
one pass and the rest in later ones: a prompt chunk (vLLM `max_num_batched_tokens` with
chunked prefill, SGLang `chunked_prefill_size`) or a micro-batch (llama.cpp `n_ubatch`,
at most `n_batch`). Each engine's adapter reads its own sizes from a launch record
(`EngineAdapter.prompt_sizes`); this module only uses them. Position p of a scored text
is the logprob of token p + 1, read from the logits at token p, so a split at `size`
first shows at position `size`. When every moved text is identical before one of the
sizes, the largest such size is named as the likely boundary, with its evidence: how
many first differ exactly at a multiple of it, and how many of the texts longer and
shorter than it moved. It is a hint, not a proven cause: a text that first differs late
can have other reasons.

A compiled engine that pads a prompt to a length bucket (servediff's transformers
engine: powers of two from 128) computes each bucket with kernels of its own; that is
a shape fact to group texts by (shapes.py), not a boundary inside a text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servediff.analysis.findings import BoundaryHint, MovedText
from servediff.engines import registry
from servediff.evidence import Launch


@dataclass(frozen=True)
class EngineShapes:
    """What a launch says of the shapes its engine computes in: token sizes that split a
    long prompt, by the engine's own names (several launches may give one name several
    sizes), and the smallest compile bucket of an engine that pads (None: it does not)."""

    sizes: tuple[tuple[str, int], ...] = ()
    bucket_floor: int | None = None

    def joined(self, other: EngineShapes) -> EngineShapes:
        """The shapes of two launches compared with each other."""
        floors = {f for f in (self.bucket_floor, other.bucket_floor) if f is not None}
        return EngineShapes(sizes=tuple(dict.fromkeys((*self.sizes, *other.sizes))),
                            bucket_floor=min(floors) if len(floors) == 1 else None)


def engine_shapes(launch: Launch) -> EngineShapes:
    """The shapes one launch computed in, as its engine's adapter reads them from the
    launch record (nothing for an engine that reports none of them)."""
    adapter = registry.of_record(launch.engine)
    if adapter is None:
        return EngineShapes()
    return EngineShapes(sizes=tuple(sorted(adapter.prompt_sizes(launch).items())),
                        bucket_floor=adapter.bucket_floor(launch))


def boundary_hint(moved: Sequence[MovedText], scored: Mapping[str, int],
                  shapes: EngineShapes) -> BoundaryHint | None:
    """The largest of the engine's sizes at or before every moved text's first differing
    position. `scored`: the scored positions of every compared text, by tag."""
    known = [t for t in moved if t.first is not None]
    if not known:
        return None
    first = min(t.first for t in known if t.first is not None)
    fits = [(size, name) for name, size in shapes.sizes if 0 < size <= first]
    if not fits:
        return None
    size, name = max(fits)
    moved_tags = {t.tag for t in moved}
    longer = [tag for tag, n in scored.items() if n > size]
    shorter = [tag for tag, n in scored.items() if n <= size]
    return BoundaryHint(
        name=name, tokens=size, texts=len(known),
        at_multiple=sum(t.first is not None and t.first % size == 0 for t in known),
        longer=len(longer), longer_moved=len(moved_tags.intersection(longer)),
        shorter=len(shorter), shorter_moved=len(moved_tags.intersection(shorter)))
