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
