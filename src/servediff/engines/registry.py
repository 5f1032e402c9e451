"""Engine registry: names to lazy `module:Class` entries, so `--help` never imports torch.

Adding an engine is one adapter module plus its line here.
"""

from __future__ import annotations

import importlib
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
