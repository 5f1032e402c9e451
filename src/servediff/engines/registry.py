"""Engine registry: names to lazy `module:Class` entries, so `--help` never imports torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from pydantic import ValidationError

from servediff.errors import PlanError
from servediff.validation import describe

if TYPE_CHECKING:
    from servediff.engines.base import EngineAdapter, EngineOptions
    from servediff.plan import Plan

ENGINES: dict[str, str] = {
    "transformers": "servediff.engines.transformers:TransformersAdapter",
}


def create(name: str) -> EngineAdapter:
    try:
        target = ENGINES[name]
    except KeyError:
        raise PlanError(
            f"unknown engine {name!r}; known engines: {', '.join(sorted(ENGINES))}"
        ) from None
    module, cls = target.split(":")
    adapter: EngineAdapter = getattr(importlib.import_module(module), cls)()
    return adapter


def arm_options(plan: Plan, arm: str) -> EngineOptions:
    adapter = create(plan.engine)
    merged = {**plan.engine_options, **plan.arms[arm].options}
    return adapter.options_model.model_validate(merged)


def validate_arm_options(plan: Plan, source: str) -> None:
    """Check every arm's options against its engine, naming the exact key on error."""
    if plan.engine not in ENGINES:
        raise PlanError(
            f"{source}: engine: unknown engine {plan.engine!r}; "
            f"known engines: {', '.join(sorted(ENGINES))}"
        )
    options_model = create(plan.engine).options_model
    try:
        options_model.model_validate(plan.engine_options)
    except ValidationError as exc:
        raise PlanError(describe(exc, source, "engine_options")) from None
    for name, arm in plan.arms.items():
        try:
            options_model.model_validate({**plan.engine_options, **arm.options})
        except ValidationError as exc:
            raise PlanError(describe(exc, source, f"arms.{name}.options")) from None
