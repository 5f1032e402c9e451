"""Which shape the moved texts of a comparison share.

The compared texts are grouped by each shape fact the run knows of them: their length
bucket, the power of two at or above the token count (or, for an engine that pads to
compile buckets, the bucket it pads the text to: the shape whose kernels it compiled
and may have tuned again), and for each size the engine splits a long prompt in, how
many chunks of that size the text is computed in. A group is named when it holds more
of the moved texts than chance allows: a one-sided Fisher exact test of the table (in
the group, outside) x (moved, not), Bonferroni-corrected over the groups tried, below
0.05. When the moved texts are exactly the texts of some groups, those groups are
tested as one, corrected over every union of groups there is; several groups named one
by one are tested again as one the same way. Of the facts, the one whose named groups
have the smallest p is kept, its p corrected again over the facts tried. The answer
says whether the moved texts are exactly the texts of the named groups. A single moved
text in a group of its own separates exactly and means nothing: the test does not name
it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Literal

from servediff.analysis import stats
from servediff.analysis.boundaries import EngineShapes
from servediff.analysis.findings import ShapeGroup, SharedShape

Fact = Literal["length bucket", "compile bucket", "chunks"]

ALPHA = 0.05


def length_bucket(tokens: int) -> int:
    """The power of two at or above a token count."""
    return 1 << max(0, tokens - 1).bit_length()


def compile_bucket(tokens: int, floor: int) -> int:
    """The bucket a compiled engine pads a text to: the power of two from `floor` up."""
    width = floor
    while width < tokens:
        width *= 2
    return width


def chunks(tokens: int, size: int) -> int:
    """How many pieces of `size` tokens a prompt of `tokens` is computed in."""
    return -(-tokens // size)


def _p(members: Collection[str], moved: set[str], total: int, tests: int) -> float:
    inside = len(set(members) & moved)
    p = stats.fisher_greater(inside, len(members) - inside, len(moved) - inside,
                             total - len(members) - (len(moved) - inside))
    return stats.stable(min(1.0, p * tests))


ShapeFact = tuple[Fact, str | None, int | None, Callable[[int], int]]


def _facts(shapes: EngineShapes) -> list[ShapeFact]:
    """The facts to group by: (fact, the engine's name of its size, the size, the group
    of a token count)."""
    floor = shapes.bucket_floor
    first: ShapeFact = ("length bucket", None, None, length_bucket) if floor is None else \
        ("compile bucket", None, floor, partial(compile_bucket, floor=floor))
    return [first, *(("chunks", name, size, partial(chunks, size=size))
                     for name, size in shapes.sizes)]


def shared_shape(moved: Collection[str], lengths: Mapping[str, int],
                 shapes: EngineShapes | None = None) -> SharedShape | None:
    """The compared texts' lengths (tokens) by tag, the tags that moved, and what the run
    knows of the engine's shapes."""
    hit = {t for t in moved if t in lengths}
    if not hit or len(hit) == len(lengths):
        return None
    found = []
    for fact, name, size, key in _facts(shapes or EngineShapes()):
        groups: dict[int, list[str]] = {}
        for tag, n in lengths.items():
            groups.setdefault(key(n), []).append(tag)
        if len(groups) > 1:
            found.append(_grouped(groups, hit, len(lengths)).model_copy(
                update={"fact": fact, "size_name": name, "size": size}))
    if not found:
        return None
    tried = len(found)
    best = min(found, key=lambda f: (f.p_adjusted is None, f.p_adjusted or 1.0))
    p = None if best.p_adjusted is None else stats.stable(min(1.0, best.p_adjusted * tried))
    if p is None or p >= ALPHA:
        return found[0].model_copy(update={"facts_tried": tried, "named": [], "exact": False,
                                           "p_adjusted": None})
    return best.model_copy(update={"facts_tried": tried, "p_adjusted": p})


def _grouped(groups: dict[int, list[str]], hit: set[str], total: int) -> SharedShape:
    """One fact's groups tested."""
    unions = 2 ** len(groups) - 2

    def members(values: list[int]) -> set[str]:
        return {t for v in values for t in groups[v]}

    rows = [ShapeGroup(value=value, texts=len(tags), moved=len(set(tags) & hit),
                       p_adjusted=_p(tags, hit, total, len(groups)))
            for value, tags in sorted(groups.items())]
    # the groups every text of which moved: when they hold all the moved texts, the
    # moved texts are exactly those groups (tested as one, over every union there is)
    full = [v for v, tags in sorted(groups.items()) if set(tags) <= hit]
    named = full if full and members(full) == hit else []
    together = _p(members(named), hit, total, unions) if named else None
    if together is None or together >= ALPHA:
        named = [g.value for g in rows if g.p_adjusted < ALPHA]
        if len(named) == 1:
            together = next(g.p_adjusted for g in rows if g.value == named[0])
        elif named:
            together = _p(members(named), hit, total, unions)
        else:
            together = None
        if together is not None and together >= ALPHA:
            named, together = [], None
    return SharedShape(fact="length bucket", groups=rows, named=named,
                       exact=bool(named) and members(named) == hit, p_adjusted=together)
