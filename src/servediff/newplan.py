"""A new plan's text for a chosen engine and model (`servediff init`).

The plan is commented for someone who has not read the docs: two arms (the
engine as it comes, and one flag to test), the probes with their settings
written out, and on top the protocol's size and a rough duration. `small`
takes its probe settings from the packaged demo plan (sized for a laptop
CPU); `full` writes the defaults.
"""

from __future__ import annotations

import json
import textwrap
import tomllib
from importlib import resources
from typing import Any

from servediff import probes
from servediff.engines import registry
from servediff.plan import ProbesSpec


def toml_value(value: Any) -> str:
    """A TOML literal for the plain values a plan holds."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str | int | float):
        return json.dumps(value)
    raise TypeError(f"no TOML literal for {value!r}")


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
        "# a built-in model or a path (a folder of safetensors, or a GGUF file for llamacpp)",
        f"model = {toml_value(model)}",
        "# cold loads per arm for drift (each a new engine process), and for cost (A B B A)",
        "loads_per_arm = 2",
        "cost_loads_per_arm = 2",
        "# adaptive = true: one more cost load per arm (up to max_cost_loads) while a speed",
        "# comparison is within noise",
        "# adaptive = true",
        "# max_cost_loads = 4",
        "# loads = \"combined\": drift, then cost probes in each cold load (half the starts)",
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
        lines += [f"{k} = {toml_value(v)}" for k, v in settings.items()]
    lines += [
        "",
        "# Cost loads wait for a quiet machine; \"refuse\" stops a run on a busy one,",
        "# \"mark\" goes on and marks its speed claims as measured on a busy machine.",
        "[quiet]",
        f"action = {toml_value('mark' if small else 'refuse')}",
        "",
    ]
    return "\n".join(lines)
