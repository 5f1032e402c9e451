"""A probe's settings as the plan sees them, and the registry of probes by section.

This module is a leaf under the plan: `plan.py` builds its `[probes]` table
from `sections_model()` and asks each section's settings what the plan needs of
a probe (its phase, its checks against the plan and the engine, the settings
that a lock leaves out at their defaults). The probe classes themselves
(probes/base.py) sit above the plan and are loaded from `PROBES` by name.

Adding a probe is one module (probes/<name>.py: its settings, its probe class)
plus its line in `PROBES`.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field, create_model

from servediff.engines import registry
from servediff.engines.base import Capability
from servediff.evidence import Phase

# section in the plan -> the probe's class; the order is the order its cells run in a load:
# drift probes, then cost probes; within the cost phase speed runs first, before anything
# long can hurt the engine, and the sweep, which may kill it, last
PROBES: dict[str, str] = {
    "repeat": "servediff.probes.repeat:RepeatProbe",
    "concurrency": "servediff.probes.concurrency:ConcurrencyProbe",
    "generate": "servediff.probes.generate:GenerateProbe",
    "speed": "servediff.probes.speed:SpeedProbe",
    "prefix": "servediff.probes.prefix:PrefixProbe",
    "sweep": "servediff.probes.sweep:SweepProbe",
}


class PlanShape(Protocol):
    """What a probe's settings may check of the rest of the plan (plan.Plan has it)."""

    @property
    def loads_per_arm(self) -> int: ...


@dataclass(frozen=True)
class Cut:
    """One cut a time budget may make to a plan (servediff.budget): `rank` orders it among
    every cut of the plan, the cheapest loss of information first; `says` is what it
    keeps, in words; `changes` are the settings it sets (a probe's: in its own table)."""

    rank: int
    says: str
    changes: dict[str, Any]


def halved(value: int, floor: int) -> int | None:
    """Half of `value`, where that is `floor` or more (None: nothing left to cut)."""
    return value // 2 if value // 2 >= floor else None


def tokens_list(lengths: list[int]) -> str:
    """128 and 256, 512: prompt lengths in words."""
    words = [f"{n:,}" for n in lengths]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


class ProbeSettings(BaseModel):
    """A probe's table in the plan; `section` is its name there: `[probes.<section>]`, and
    `phase` the loads its cells run in. Each probe module defines its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    section: ClassVar[str]
    phase: ClassVar[Phase]
    # settings added after plans were locked with the probe: at these values they are left
    # out of the lock's sha256, which is then what it was before they existed
    later_defaults: ClassVar[dict[str, Any]] = {}

    def on(self) -> bool:
        """Whether the plan runs the probe (a probe without `enabled` always runs)."""
        return bool(getattr(self, "enabled", True))

    def check(self, plan: PlanShape) -> None:
        """Raise ValueError where these settings do not fit the rest of the plan."""

    def refused(self, engine: str, capabilities: Set[Capability]) -> str | None:
        """Why an engine with these capabilities cannot run the probe as set (a line that
        names the setting), or None where it can."""
        return None

    def cuts(self, context: int | None) -> list[Cut]:
        """The cuts a time budget may make to these settings, in the order they apply,
        each on top of the ones before it and each keeping what the probe needs to answer
        anything; `context`: the plan's context length where it sets one (none: no cut)."""
        return []


def distinct_sorted(values: list[int], if_empty: str) -> list[int]:
    """A list setting that needs one value at least, kept sorted and without repeats."""
    if not values:
        raise ValueError(if_empty)
    return sorted(set(values))


def check_loads(plan: PlanShape, section: str, loads: list[int] | None) -> None:
    """A probe's `loads` setting names drift loads of the plan."""
    if loads is not None and (not loads or max(loads) > plan.loads_per_arm):
        raise ValueError(f"probes.{section}.loads must name drift loads from 1 to "
                         f"loads_per_arm ({plan.loads_per_arm}), got {loads}")


def entry(section: str) -> str:
    """The `module:Class` of the probe registered as `section`."""
    try:
        return PROBES[section]
    except KeyError:
        raise KeyError(f"no registered probe {section!r}; the probes are "
                       f"{', '.join(PROBES)}") from None


def settings_of(section: str) -> type[ProbeSettings]:
    """The settings model of the probe registered as `section`."""
    return _settings(entry(section))


@cache
def _settings(entry: str) -> type[ProbeSettings]:
    settings = registry.instance(entry).settings
    if not (isinstance(settings, type) and issubclass(settings, ProbeSettings)):
        raise TypeError(f"probe registry: {entry}.settings is not a ProbeSettings model")
    return settings


def sections() -> list[type[ProbeSettings]]:
    """Every registered probe's settings model, in the order its cells run."""
    return [settings_of(section) for section in PROBES]


def sections_model() -> type[BaseModel]:
    """The plan's `[probes]` table as one model: a field per registered probe."""
    return _sections_model(tuple(PROBES.items()))


@cache
def _sections_model(entries: tuple[tuple[str, str], ...]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for section, entry in entries:
        settings = _settings(entry)
        if settings.section != section:
            raise KeyError(f"probe registry: {entry} is registered as {section!r} but its "
                           f"settings say {settings.section!r}")
        fields[section] = (settings, Field(default_factory=settings))
    model: type[BaseModel] = create_model(
        "Probes", __config__=ConfigDict(extra="forbid", frozen=True), **fields)
    return model
