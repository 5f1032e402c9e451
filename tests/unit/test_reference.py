"""Every setting's meaning has one source, its Field description: docs/plans.md's
"Every setting" block and `servediff init`'s comments are written from it."""

from __future__ import annotations

import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from scripts import plan_reference
from servediff.newplan import plan_text
from servediff.plan import Plan, ProbesSpec, resolve_plan
from servediff.probes.repeat import RepeatSettings
from servediff.probes.settings import sections
from servediff.probes.speed import SpeedSettings
from servediff.reference import settings_reference, written


def setting_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every setting a plan file may hold, as a dotted path (`NAME` for a named table)."""
    paths: set[str] = set()
    for name, info in written(model, prefix):
        annotation: Any = info.annotation
        inner = typing.get_args(annotation)[1] if typing.get_origin(annotation) is dict \
            else None
        if annotation is ProbesSpec:
            for settings in sections():
                paths |= setting_paths(settings, f"probes.{settings.section}.")
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths |= setting_paths(annotation, f"{prefix}{name}.")
        elif isinstance(inner, type) and issubclass(inner, BaseModel):
            paths |= setting_paths(inner, f"{prefix}{name}.NAME.")
        else:
            paths.add(prefix + name)
    return paths


def toml_paths(table: dict[str, Any], prefix: str = "") -> set[str]:
    paths: set[str] = set()
    for key, value in table.items():
        if key == "engine_options":
            paths.add(key)
        elif isinstance(value, dict) and not (prefix + key).endswith(("env", "options")):
            paths |= toml_paths(value, f"{prefix}{key}.")
        else:
            paths.add(prefix + key)
    return paths


def test_the_reference_holds_every_setting_once_as_toml():
    # top-level settings come before any table, so each lands where a plan file puts it
    assert toml_paths(tomllib.loads(settings_reference())) == setting_paths(Plan)
    # and the settings servediff sets itself are not among them
    assert "cost_loads" not in setting_paths(Plan) and "confirmation" not in setting_paths(Plan)


def test_docs_plans_md_holds_the_current_reference(monkeypatch: pytest.MonkeyPatch):
    text = plan_reference.DOC.read_text(encoding="utf-8")
    assert plan_reference.with_reference(text) == text, \
        "docs/plans.md is out of date: run python scripts/plan_reference.py"
    # a changed description is a changed reference: the committed block no longer matches
    info = Plan.model_fields["loads_per_arm"]
    monkeypatch.setattr(info, "description", "cold starts per arm, described anew")
    assert plan_reference.with_reference(text) != text
    assert "cold starts per arm, described anew" in plan_reference.with_reference(text)


def test_a_setting_without_a_description_is_named(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(RepeatSettings.model_fields["shuffle"], "description", None)
    with pytest.raises(ValueError, match=r"setting probes\.repeat\.shuffle: no description"):
        settings_reference()


def test_init_comments_its_settings_from_the_same_descriptions(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    text = plan_text("transformers", "smollm2", "p", small=True)
    assert "# within-load repeats of every text, after the first scoring" in text
    monkeypatch.setattr(RepeatSettings.model_fields["count"], "description",
                        "repeats, described anew")
    again = plan_text("transformers", "smollm2", "p", small=True)
    assert "count = 1                      # repeats, described anew" in again
    # and the plan init writes still validates
    plan, _ = resolve_plan(tomllib.loads(again), "p.toml", tmp_path)
    assert plan.probes.get(RepeatSettings).count == 1


def test_a_refused_value_says_what_its_setting_means(tmp_path: Path):
    from servediff.errors import PlanError

    raw = {"engine": "transformers", "model": "smollm2", "arms": {"a": {}},
           "probes": {"speed": {"levels": [0]}}}
    with pytest.raises(PlanError) as refused:
        resolve_plan(raw, "p.toml", tmp_path)
    meaning = SpeedSettings.model_fields["levels"].description
    assert f"p.toml: probes.speed.levels[0]: Input should be greater than or equal to 1 " \
        f"(levels: {meaning})" in str(refused.value)
