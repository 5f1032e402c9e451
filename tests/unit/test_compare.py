from __future__ import annotations

import json

import pytest

from servediff.analysis.compare import TextScore, compare, moved
from servediff.errors import ScoreFileError
from servediff.scorefile import read_scores


def test_moved_threshold_zero_means_any_difference():
    assert moved(1e-12, 0.0)
    assert not moved(0.0, 0.0)
    assert not moved(0.01, 0.05)
    assert moved(-0.06, 0.05)


def test_compare_counts_moves_and_max():
    a = {"x": TextScore(10.0), "y": TextScore(20.0), "z": TextScore(5.0), "only_a": TextScore(1.0)}
    b = {"x": TextScore(10.0), "y": TextScore(20.5), "z": TextScore(4.0), "only_b": TextScore(1.0)}
    result = compare(a, b)
    assert result.compared == 3
    assert result.moved == 2
    assert result.moved_tags == ["y", "z"]
    assert result.max_abs_delta == 1.0
    assert result.max_tag == "z"
    assert result.only_a == ["only_a"] and result.only_b == ["only_b"]
    assert not result.bit_identical
    assert compare(a, b, threshold=0.75).moved == 1


def test_compare_refuses_texts_scored_with_different_ids():
    a = {"x": TextScore(10.0, [1, 2, 3]), "y": TextScore(3.0, [1, 4])}
    b = {"x": TextScore(12.0, [2, 3]), "y": TextScore(3.0, [1, 4])}
    result = compare(a, b)
    assert result.ids_differ == ["x"]
    assert result.compared == 1 and result.moved == 0


def test_bit_identical_needs_identical_logprobs():
    a = {"x": TextScore(1.0, [1, 2, 3], [-0.5, -0.5])}
    b = {"x": TextScore(1.0, [1, 2, 3], [-0.25, -0.75])}
    assert not compare(a, b).bit_identical
    assert compare(a, a).bit_identical


def test_read_three_formats(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"x": 1.5, "y": 2}))
    (tmp_path / "b.json").write_text(json.dumps([{"tag": "x", "sum_nll": 1.5, "extra": 1}]))
    (tmp_path / "c.jsonl").write_text('{"tag": "x", "sum_nll": 1.5, "token_ids": [1, 2]}\n\n'
                                      '{"tag": "y", "sum_nll": 3}\n')
    assert read_scores(tmp_path / "a.json")["y"].sum_nll == 2.0
    assert read_scores(tmp_path / "b.json")["x"].sum_nll == 1.5
    rows = read_scores(tmp_path / "c.jsonl")
    assert rows["x"].token_ids == [1, 2] and rows["y"].sum_nll == 3.0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{}", "no usable rows"),
        ("[]", "no usable rows"),
        ('{"x": "high"}', "x: sum_nll must be a finite number"),
        ('[{"tag": "x"}]', "row 1: needs a string 'tag'"),
        ('{"tag": "x", "sum_nll": 1}\n{"tag": "x", "sum_nll": 2}\n', "line 2: tag 'x' already"),
        ("not json at all", ":1: neither JSON nor JSONL"),
        ('"a string"', "expected a JSON object or a list"),
    ],
)
def test_unusable_score_files(tmp_path, body, expected):
    path = tmp_path / "s.json"
    path.write_text(body)
    with pytest.raises(ScoreFileError) as info:
        read_scores(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_exact_statistics():
    from servediff.analysis.stats import detectable_rate, exact_ci, mcnemar

    lo, hi = exact_ci(0, 45)
    assert lo == 0.0 and hi == pytest.approx(0.0787, abs=1e-4)  # 1 - 0.025 ** (1/45)
    lo, hi = exact_ci(23, 43)
    assert lo < 23 / 43 < hi
    assert exact_ci(0, 0) is None
    assert detectable_rate(45) == pytest.approx(1 - 0.05 ** (1 / 45))
    assert mcnemar(0, 0) is None
    assert mcnemar(0, 6) == pytest.approx(2 * 0.5 ** 6)
    assert compare({"x": TextScore(1.0)}, {"x": TextScore(2.0)}).moved_ci95[0] > 0


def scored(logprobs: list[float]) -> TextScore:
    return TextScore(-sum(logprobs), list(range(len(logprobs) + 1)), logprobs)


def test_a_text_that_moves_from_its_first_token_is_named_from_the_start():
    base = [-1.0, -2.0, -0.5, -3.0]
    a = {"x": scored(base), "y": scored(base), "same": scored(base)}
    b = {"x": scored([-1.25, -2.0, -0.5, -3.0]), "y": scored([-1.5, -2.5, -0.5, -3.0]),
         "same": scored(base)}
    result = compare(a, b)
    texts = {t.tag: t for t in result.moved_texts}
    assert sorted(texts) == ["x", "y"]
    assert (texts["x"].first, texts["x"].differing, texts["x"].max_abs) == (0, 1, 0.25)
    assert (texts["y"].first, texts["y"].differing, texts["y"].max_abs) == (0, 2, 0.5)
    assert texts["x"].length == 4
    first = result.first_moved
    assert first is not None and (first.texts, first.from_start) == (2, 2)
    assert (first.min, first.max, first.max_fraction) == (0, 0, 0.0)


def test_a_text_identical_up_to_a_boundary_first_moves_there():
    # 12 scored positions identical, then the rest moved: positions 12.. of 16 and of 24
    def text(n: int, moved_from: int | None) -> TextScore:
        return scored([-1.0 - (0.5 if moved_from is not None and i >= moved_from else 0.0)
                       for i in range(n)])

    a = {"short": text(16, None), "long": text(24, None), "tiny": text(8, None)}
    b = {"short": text(16, 12), "long": text(24, 12), "tiny": text(8, None)}
    result = compare(a, b)
    texts = {t.tag: t for t in result.moved_texts}
    assert (texts["short"].first, texts["short"].differing) == (12, 4)
    assert (texts["long"].first, texts["long"].differing) == (12, 12)
    first = result.first_moved
    assert first is not None
    assert (first.from_start, first.min, first.median, first.max) == (0, 12, 12, 12)
    assert (first.min_fraction, first.max_fraction) == (0.5, 0.75)


def test_without_stored_logprobs_the_position_is_unknown():
    result = compare({"x": TextScore(1.0)}, {"x": TextScore(2.0)})
    (text,) = result.moved_texts
    assert text.first is None and result.first_moved is None


def test_the_report_says_where_moved_texts_first_differ():
    from servediff.report.words import first_moved_text

    base = [-1.0] * 20

    def moved_from(*starts: int) -> str | None:
        a = {f"t{i}": scored(base) for i in range(len(starts))}
        b = {f"t{i}": scored([-1.0 if j < s else -1.5 for j in range(20)])
             for i, s in enumerate(starts)}
        return first_moved_text("L1 vs L2", compare(a, b))

    assert moved_from(0, 0) == ("L1 vs L2: all 2 moved texts first differ at position 0: "
                                "another kernel or path from the start")
    # one common position: named as the likely boundary, as a hint
    assert "identical up to position 16 (80% of their lengths), where they first differ: a " \
        "boundary there" in (moved_from(16, 16) or "")
    # scattered: later than 0, and no boundary named
    scattered = moved_from(3, 11, 16) or ""
    assert "differ from positions 3 to 16 (median 11;" in scattered
    assert "no common position" in scattered and "boundary" not in scattered
    assert "1 of 2 moved texts first differ at position 0" in (moved_from(0, 9) or "")
    assert first_moved_text("x", compare({"x": TextScore(1.0)}, {"x": TextScore(2.0)})) is None
