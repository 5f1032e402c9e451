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
    "vllm": "servediff.engines.vllm:VllmAdapter",
    "llamacpp": "servediff.engines.llamacpp:LlamaCppAdapter",
    "sglang": "servediff.engines.sglang:SglangAdapter",
    "openai": "servediff.engines.external:ExternalAdapter",
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


def validate_engine(plan: Plan, source: str) -> None:
    """Check the plan against its engine: options per arm, launch or external endpoint."""
    if plan.engine not in ENGINES:
        raise PlanError(
            f"{source}: engine: unknown engine {plan.engine!r}; "
            f"known engines: {', '.join(sorted(ENGINES))}"
        )
    adapter = create(plan.engine)
    if "reload" in adapter.capabilities:
        if plan.base_url is not None:
            raise PlanError(f"{source}: base_url: engine {plan.engine!r} is started by "
                            "servediff; base_url is only for engine = \"openai\"")
    else:
        if plan.base_url is None:
            raise PlanError(f"{source}: base_url: required for engine {plan.engine!r} "
                            "(an endpoint servediff does not start)")
        if plan.loads_per_arm != 1:
            raise PlanError(f"{source}: loads_per_arm: must be 1 for an external endpoint; "
                            "servediff cannot reload a server it did not start")
        if plan.launch.command is not None:
            raise PlanError(f"{source}: launch.command: an external endpoint is not launched")
        for name, arm in plan.arms.items():
            if arm.args or arm.env:
                raise PlanError(f"{source}: arms.{name}: args and env need a server that "
                                "servediff starts; an external endpoint takes options only")
    options_model = adapter.options_model
    try:
        options_model.model_validate(plan.engine_options)
    except ValidationError as exc:
        raise PlanError(describe(exc, source, "engine_options")) from None
    for name, arm in plan.arms.items():
        try:
            options_model.model_validate({**plan.engine_options, **arm.options})
        except ValidationError as exc:
            raise PlanError(describe(exc, source, f"arms.{name}.options")) from None
