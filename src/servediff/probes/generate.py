"""The generate probe: corpus prompts continued greedily, repeated one at a time.

Each prompt's `repeats` generations are sent one after another (nothing else
in flight), so what differs between them is the load's own state, not batch
neighbours. Analysis compares them within the load, across loads and arms.
"""

from __future__ import annotations

from collections.abc import Callable

from servediff.engines.base import EngineAdapter, EngineOptions
from servediff.engines.transport import EngineClient
from servediff.evidence import Group
from servediff.probes import requests


def measure(adapter: EngineAdapter, client: EngineClient, options: EngineOptions,
            prompts: dict[str, list[int]], max_tokens: int, repeats: int,
            advanced: Callable[[int], None]) -> list[Group]:
    groups = []
    for tag, ids in prompts.items():
        responses = [requests.generation(adapter, client, ids, max_tokens, options, i)
                     for i in range(repeats)]
        groups.append(Group(tag=tag, length=len(ids), level=1, max_tokens=max_tokens,
                            prompt_sha256=requests.prompt_sha256(ids), responses=responses))
        advanced(len(groups))
    return groups
