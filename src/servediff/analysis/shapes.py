"""Which shape the moved texts of a comparison share.

The compared texts are grouped by a fact the run knows of each: today their
length bucket, the power of two at or above the token count (the shape a
compiled engine pads a text to, and where kernels tuned per shape differ). A
group is named when it holds more of the moved texts than chance allows: a
one-sided Fisher exact test of the table (in the group, outside) x (moved,
not), Bonferroni-corrected over the groups tried, below 0.05. When the moved
texts are exactly the texts of some groups, those groups are tested as one,
corrected over every union of groups there is; several groups named one by
one are tested again as one the same way. The answer says whether the moved
texts are exactly the texts of the named groups. A single moved text in a group
of its own separates exactly and means nothing: the test does not name it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from servediff.analysis import stats
from servediff.analysis.findings import ShapeGroup, SharedShape

ALPHA = 0.05


def length_bucket(tokens: int) -> int:
    """The power of two at or above a token count."""
    return 1 << max(0, tokens - 1).bit_length()


def _p(members: Collection[str], moved: set[str], total: int, tests: int) -> float:
    inside = len(set(members) & moved)
    p = stats.fisher_greater(inside, len(members) - inside, len(moved) - inside,
                             total - len(members) - (len(moved) - inside))
    return stats.stable(min(1.0, p * tests))


def shared_shape(moved: Collection[str], lengths: Mapping[str, int]) -> SharedShape | None:
    """The compared texts' lengths (tokens) by tag, and the tags that moved."""
    hit = {t for t in moved if t in lengths}
    if not hit or len(hit) == len(lengths):
        return None
    groups: dict[int, list[str]] = {}
    for tag, n in lengths.items():
        groups.setdefault(length_bucket(n), []).append(tag)
    if len(groups) < 2:
        return None
    total, unions = len(lengths), 2 ** len(groups) - 2

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
