"""The shapes an engine computes a prompt in, as its launch records them, and whether
the moved texts of a comparison first differ at or past one of its sizes.

An engine that splits a long prompt computes the logits of its first `size` tokens in
one pass and the rest in later ones: a prompt chunk (vLLM `max_num_batched_tokens`
with chunked prefill, SGLang `chunked_prefill_size`) or a micro-batch (llama.cpp
`n_ubatch`, at most `n_batch`). Position p of a scored text is the logprob of token
p + 1, read from the logits at token p, so a split at `size` first shows at position
`size`. When every moved text is identical before one of the sizes, the largest such
size is named as the likely boundary, with its evidence: how many first differ exactly
at a multiple of it, and how many of the texts longer and shorter than it moved. It is
a hint, not a proven cause: a text that first differs late can have other reasons.

A compiled engine that pads a prompt to a length bucket (servediff's transformers
engine: powers of two from 128) computes each bucket with kernels of its own; that is
a shape fact to group texts by (shapes.py), not a boundary inside a text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servediff.analysis.findings import BoundaryHint, MovedText
from servediff.evidence import Launch

# llama.cpp's defaults (common/common.h): a logical batch of 2,048, a micro-batch of 512
LLAMA_BATCH, LLAMA_UBATCH = 2048, 512
LLAMA_FLAGS = {"-b": "n_batch", "--batch-size": "n_batch", "-ub": "n_ubatch",
               "--ubatch-size": "n_ubatch"}
LLAMA_ENV = {"LLAMA_ARG_BATCH": "n_batch", "LLAMA_ARG_UBATCH": "n_ubatch"}
VLLM_FLAGS = {"--max-num-batched-tokens": "max_num_batched_tokens"}
BUCKETS_FROM = re.compile(r"buckets from (\d+)")


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


def _flags(command: Sequence[str], names: Mapping[str, str]) -> dict[str, int]:
    """The whole-number values a command gives its flags (`-f N` or `-f=N`), by the name
    each flag sets; the last one given wins, as with the engines' own parsers."""
    found: dict[str, int] = {}
    for i, part in enumerate(command):
        flag, _, value = part.partition("=")
        if flag in names:
            value = value or (command[i + 1] if i + 1 < len(command) else "")
            if value.isdigit():
                found[names[flag]] = int(value)
    return found


def _llama_sizes(command: Sequence[str], env: Mapping[str, str]) -> dict[str, int]:
    found: dict[str, int] = {"n_batch": LLAMA_BATCH, "n_ubatch": LLAMA_UBATCH}
    for key, name in LLAMA_ENV.items():
        if key in env and env[key].isdigit():
            found[name] = int(env[key])
    found.update(_flags(command, LLAMA_FLAGS))
    # llama.cpp takes the micro-batch no larger than the batch
    found["n_ubatch"] = min(found["n_ubatch"], found["n_batch"])
    return found


def engine_shapes(launch: Launch) -> EngineShapes:
    """The shapes one launch computed in, from its command, environment and what the
    engine reported at start (nothing for an engine that reports none of them)."""
    engine = launch.engine
    name = str((engine.get("version") or {}).get("engine") or engine.get("engine") or "")
    sizes: dict[str, int] = {}
    floor = None
    if name == "llama.cpp":
        sizes = _llama_sizes(launch.command, launch.env_diff)
    elif name == "vllm":
        # what its log said, else the arm's flag (a server that started with a chunk below
        # its context chunks: without chunked prefill vLLM refuses such a size)
        tokens = launch.startup.get("max_num_batched_tokens") or _flags(
            launch.command, VLLM_FLAGS).get("max_num_batched_tokens")
        if isinstance(tokens, int) and tokens > 0:
            sizes = {"max_num_batched_tokens": tokens}
    elif name == "sglang":
        tokens = (engine.get("server_info") or {}).get("chunked_prefill_size")
        if isinstance(tokens, int) and tokens > 0:  # -1: chunked prefill off
            sizes = {"chunked_prefill_size": tokens}
    elif m := BUCKETS_FROM.search(str(engine.get("shapes") or "")):
        floor = int(m.group(1))
    return EngineShapes(sizes=tuple(sorted(sizes.items())), bucket_floor=floor)


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
