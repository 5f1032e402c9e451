"""Reading per-text score files from anywhere for `servediff compare`.

Accepted: a JSON object `{tag: sum_nll}`; a JSON list of rows; or JSONL rows.
A row is an object with `tag` and `sum_nll` (`token_ids` optional: when both
files carry ids, texts scored with different ids are not compared).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from servediff.analysis.compare import TextScore
from servediff.errors import ScoreFileError


def read_scores(path: Path) -> dict[str, TextScore]:
    try:
        body = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScoreFileError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScoreFileError(f"{path}: cannot read ({exc})") from None
    try:
        data: Any = json.loads(body)
        rows = _from_json(data, path)
    except json.JSONDecodeError:
        rows = _from_jsonl(body, path)
    if not rows:
        raise ScoreFileError(
            f"{path}: no usable rows; expected {{tag: sum_nll}} JSON, or JSON/JSONL rows "
            "with 'tag' and 'sum_nll'"
        )
    return rows


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _from_json(data: Any, path: Path) -> dict[str, TextScore]:
    if isinstance(data, dict) and "tag" not in data:
        out = {}
        for tag, value in data.items():
            number = _number(value)
            if number is None:
                raise ScoreFileError(f"{path}: {tag}: sum_nll must be a finite number, "
                                     f"got {value!r}")
            out[str(tag)] = TextScore(number)
        return out
    if isinstance(data, dict):
        data = [data]
    if isinstance(data, list):
        return _rows(enumerate(data, start=1), path, "row")
    raise ScoreFileError(f"{path}: expected a JSON object or a list of rows")


def _from_jsonl(body: str, path: Path) -> dict[str, TextScore]:
    items = []
    for lineno, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ScoreFileError(f"{path}:{lineno}: neither JSON nor JSONL ({exc.msg})") from None
    return _rows(items, path, "line")


def _rows(items: Any, path: Path, unit: str) -> dict[str, TextScore]:
    out: dict[str, TextScore] = {}
    where: dict[str, int] = {}
    for n, row in items:
        if not isinstance(row, dict):
            raise ScoreFileError(f"{path}: {unit} {n}: expected an object with tag and sum_nll")
        tag, value = row.get("tag"), _number(row.get("sum_nll"))
        if not isinstance(tag, str) or value is None:
            raise ScoreFileError(
                f"{path}: {unit} {n}: needs a string 'tag' and a finite number 'sum_nll'"
            )
        if tag in out:
            raise ScoreFileError(
                f"{path}: {unit} {n}: tag {tag!r} already on {unit} {where[tag]}; one score per "
                "tag (for a run's scores, filter with --arm, --load and --probe)"
            )
        ids = row.get("token_ids")
        out[tag] = TextScore(value, [int(i) for i in ids] if isinstance(ids, list) else None)
        where[tag] = n
    return out
