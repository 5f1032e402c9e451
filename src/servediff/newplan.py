"""A new plan's text for a chosen engine and model (`servediff init`).

The plan is commented for someone who has not read the docs: two arms (the
engine as it comes, and one flag to test), the probes with their settings
written out, and on top the protocol's size and a rough duration. `small`
takes its probe settings from the packaged demo plan (sized for a laptop
CPU); `full` writes the defaults.
"""

from __future__ import annotations

import textwrap
import tomllib
from importlib import resources
from typing import Any

from pydantic import BaseModel

from servediff import probes
from servediff.engines import registry
from servediff.plan import Plan, ProbesSpec
from servediff.probes.settings import settings_of
from servediff.reference import line, toml_value


def demo_probes() -> dict[str, dict[str, Any]]:
    text = resources.files("servediff.plans").joinpath("demo.toml").read_text()
    probes: dict[str, dict[str, Any]] = tomllib.loads(text)["probes"]
    return probes


def probe_settings(small: bool) -> dict[str, dict[str, Any]]:
    """Every probe's settings as the plan will hold them (None values left out)."""
    given = demo_probes() if small else {}
    spec = ProbesSpec.model_validate(given)
    return {name: {k: v for k, v in section.items() if v is not None}
            for name, section in spec.model_dump(mode="json").items()}


def described(text: str, model: type[BaseModel], name: str) -> list[str]:
    """A setting's line with its own description beside it (servediff.reference)."""
    return line(text, model.model_fields[name].description)


def comments(header: list[str]) -> str:
    """The plan's header: each line a TOML comment, wrapped."""
    return "".join(f"# {part}\n" for line in header
                   for part in textwrap.wrap(line, 86, subsequent_indent="  "))


def plan_text(engine: str, model: str, name: str, small: bool) -> str:
    adapter = registry.create(engine)
    base, candidate, what = adapter.example_arms
    lines = [
        "",
        f"name = {toml_value(name)}",
        f"engine = {toml_value(engine)}",
        *described(f"model = {toml_value(model)}", Plan, "model"),
        *described("loads_per_arm = 2", Plan, "loads_per_arm"),
        *described("cost_loads_per_arm = 2", Plan, "cost_loads_per_arm"),
        *described("# adaptive = true", Plan, "adaptive"),
        *described("# max_cost_loads = 4", Plan, "max_cost_loads"),
        *described('# loads = "combined"', Plan, "loads"),
        "",
    ]
    if options := adapter.example_options(small):
        lines += ["[engine_options]", *options, ""]
    lines += ["# The arms: the engine as you run it now, and the change you want to judge.",
              "[arms.baseline]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in base.items()]
    lines += ["", f"# {what}: replace it with your own flag (args), environment (env) or "
              "engine options (options)", "[arms.candidate]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in candidate.items()]
    lines += ["", "# Judging several changes at once? Write each as a factor in place of the "
              "arms:", "# servediff makes the arms (every combination of up to 3 factors), "
              "says which factor", "# changes what, and which to ship. For example:",
              "# [factors.candidate]"]
    lines += [f"# {k} = {toml_value(v)}" for k, v in candidate.items()]
    for probe, settings in probe_settings(small).items():
        lines += ["", f"# {probes.by_section(probe).description}", f"[probes.{probe}]"]
        for k, v in settings.items():
            lines += described(f"{k} = {toml_value(v)}", settings_of(probe), k)
    lines += [
        "",
        "# Cost loads wait for a quiet machine; \"refuse\" stops a run on a busy one,",
        "# \"mark\" goes on and marks its speed claims as measured on a busy machine.",
        "[quiet]",
        f"action = {toml_value('mark' if small else 'refuse')}",
        "",
    ]
    return "\n".join(lines)
