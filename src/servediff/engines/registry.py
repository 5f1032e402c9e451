"""Engine registry: names to lazy `module:Class` entries, so `--help` never imports torch.

Adding an engine is one adapter module plus its line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from servediff.errors import PlanError

if TYPE_CHECKING:
    from servediff.engines.base import EngineAdapter

ENGINES: dict[str, str] = {
    "transformers": "servediff.engines.transformers:TransformersAdapter",
    "vllm": "servediff.engines.vllm:VllmAdapter",
    "llamacpp": "servediff.engines.llamacpp:LlamaCppAdapter",
    "sglang": "servediff.engines.sglang:SglangAdapter",
    "openai": "servediff.engines.external:ExternalAdapter",
}


def known() -> str:
    return ", ".join(sorted(ENGINES))


def instance(entry: str) -> Any:
    """A new instance of a lazy registry entry `module:Class` (engines here, probes in
    probes/__init__.py)."""
    module, cls = entry.split(":")
    return getattr(importlib.import_module(module), cls)()


def create(name: str) -> EngineAdapter:
    try:
        target = ENGINES[name]
    except KeyError:
        raise PlanError(f"unknown engine {name!r}; known engines: {known()}") from None
    adapter: EngineAdapter = instance(target)
    return adapter


def of_record(engine: Mapping[str, Any]) -> EngineAdapter | None:
    """The adapter that wrote a launch record's `engine` (what its `info` reported), found
    by the name it records; None for a name no registered adapter records."""
    version = engine.get("version")
    name = str((version.get("engine") if isinstance(version, dict) else None)
               or engine.get("engine") or "")
    return _recorded(tuple(ENGINES.items())).get(name)


@cache
def _recorded(entries: tuple[tuple[str, str], ...]) -> dict[str, EngineAdapter]:
    adapters: list[EngineAdapter] = [instance(entry) for _, entry in entries]
    return {a.recorded_name or a.name: a for a in adapters}
