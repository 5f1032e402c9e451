"""Which shape moved texts share: named only when it separates them beyond chance."""

from __future__ import annotations

import random

from servediff.analysis.compare import TextScore, compare
from servediff.analysis.shapes import length_bucket, shared_shape


def test_length_buckets_are_the_power_of_two_at_or_above():
    assert [length_bucket(n) for n in (1, 2, 3, 64, 65, 128, 129, 700)] == \
        [1, 2, 4, 64, 128, 128, 256, 1024]


def corpus() -> dict[str, int]:
    """24 texts, 8 in each of the 128-, 256- and 512-token buckets."""
    return {f"t{n}": n for n in [*range(70, 126, 7), *range(140, 252, 14), *range(300, 500, 25)]}


def test_moved_texts_that_are_exactly_two_buckets_are_named_so():
    lengths = corpus()
    moved = [t for t, n in lengths.items() if n > 128]
    found = shared_shape(moved, lengths)
    assert found is not None
    assert found.named == [256, 512] and found.exact
    assert found.p_adjusted is not None and found.p_adjusted < 0.05
    assert [(g.value, g.texts, g.moved) for g in found.groups] == [
        (128, 8, 0), (256, 8, 8), (512, 8, 8)]


def test_one_bucket_that_holds_most_moved_texts_is_named_but_not_exact():
    lengths = corpus()
    moved = [t for t, n in lengths.items() if 256 < n] + ["t70"]
    found = shared_shape(moved, lengths)
    assert found is not None and found.named == [512] and not found.exact


def test_a_random_pattern_names_nothing():
    lengths = corpus()
    rng = random.Random(7)
    # patterns drawn without regard to length: a bucket is named for at most 5 % of them
    # (the corrected test's bound under chance)
    named = 0
    for _ in range(400):
        found = shared_shape(rng.sample(sorted(lengths), rng.randint(2, 12)), lengths)
        assert found is not None
        named += bool(found.named)
    assert named <= 0.05 * 400, named
    moved = ["t70", "t154", "t350", "t91", "t196", "t425"]  # two per bucket
    found = shared_shape(moved, lengths)
    assert found is not None and found.named == [] and not found.exact


def test_a_lone_moved_text_in_a_bucket_of_its_own_is_not_named():
    lengths = {"a": 100, "b": 110, "c": 120, "d": 900}
    found = shared_shape(["d"], lengths)
    assert found is not None and found.named == []


def test_nothing_to_group_when_all_or_none_moved_or_one_bucket():
    lengths = corpus()
    assert shared_shape([], lengths) is None
    assert shared_shape(list(lengths), lengths) is None
    assert shared_shape(["t70"], {"t70": 70, "t77": 77}) is None


def test_the_comparison_carries_it():
    ids = {tag: list(range(n)) for tag, n in corpus().items()}
    a = {t: TextScore(1.0, i) for t, i in ids.items()}
    b = {t: TextScore(1.5 if len(i) > 256 else 1.0, i) for t, i in ids.items()}
    shape = compare(a, b).shared_shape
    assert shape is not None and shape.named == [512] and shape.exact


def test_the_report_names_the_buckets_with_the_test():
    from servediff.report.words import shared_shape_text

    ids = {tag: list(range(n)) for tag, n in corpus().items()}
    a = {t: TextScore(1.0, i) for t, i in ids.items()}
    b = {t: TextScore(1.5 if len(i) > 128 else 1.0, i) for t, i in ids.items()}
    text = shared_shape_text("L1 vs L2", compare(a, b)) or ""
    assert text.startswith("L1 vs L2: the 16 moved texts are exactly those in the 256 and "
                           "512-token length buckets (one-sided Fisher exact p = ")
    mixed = {t: TextScore(1.5 if t in ("t70", "t154", "t350") else 1.0, i)
             for t, i in ids.items()}
    assert shared_shape_text("L1 vs L2", compare(a, mixed)) is None
