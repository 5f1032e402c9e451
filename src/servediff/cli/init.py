"""`servediff init ENGINE MODEL`: write a commented plan to start from."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import click

from servediff import atomic, gpu
from servediff.cli.console import err, out
from servediff.engines import registry
from servediff.errors import InputError
from servediff.estimate import describe, estimate, shape_lines
from servediff.models import BUILTIN_MODELS
from servediff.newplan import comments, plan_text
from servediff.plan import resolve_plan
from servediff.probes import protocol_size

# engines that servediff starts (an external endpoint's plan is written by hand: base_url)
STARTED = [name for name in registry.ENGINES if "reload" in registry.create(name).capabilities]


def plan_model(model: str, plan_dir: Path) -> str:
    """The model as the plan names it: a built-in name, a hub id, an absolute or `~/` path
    as given; a relative path from here made relative to the plan's folder, from which the
    plan resolves it (the same text when the plan is written here)."""
    given = Path(model)
    if model in BUILTIN_MODELS or given.is_absolute() or model.startswith("~") \
            or not given.exists():
        return model
    return os.path.relpath(given.resolve(), plan_dir.resolve())


@click.command(epilog="Example: servediff init vllm HuggingFaceTB/SmolLM2-135M-Instruct"
                        " --out plan.toml")
@click.argument("engine", type=click.Choice(STARTED))
@click.argument("model")
@click.option("--out", "target", type=click.Path(path_type=Path, dir_okay=False),
              default=Path("plan.toml"), show_default=True, help="the plan file to write")
@click.option("--size", type=click.Choice(["auto", "small", "full"]), default="auto",
              show_default=True,
              help="small: the demo's probe grids (a CPU); full: the defaults (a GPU); "
                   "auto: full where a GPU is seen")
@click.option("--name", default=None, help="the plan's name (default: the file's stem)")
@click.option("--force", is_flag=True, help="overwrite an existing plan file")
def init(engine: str, model: str, target: Path, size: str, name: str | None,
         force: bool) -> None:
    """Write a commented plan for ENGINE and MODEL, with its size and a rough duration."""
    if target.exists() and not force:
        raise InputError(f"{target}: exists; pass --force to overwrite it, or --out another "
                         "file")
    name = name or target.stem
    small = size == "small" or (size == "auto" and not gpu.names())
    model = plan_model(model, target.parent)
    base = target.parent
    base.mkdir(parents=True, exist_ok=True)  # a path through it must resolve
    body = plan_text(engine, model, name, small)
    plan, corpus = resolve_plan(tomllib.loads(body), str(target), base)
    found = protocol_size(plan, corpus)
    header = [
        f"servediff plan for {engine} and {model}, written by `servediff init`; run it with",
        f"`servediff run {target.name}`. Every setting: docs/plans.md.",
        "probe grids: " + ("small (the demo's, for a CPU)" if small else "full (the defaults)"),
        f"protocol: {found.loads} loads, {found.cells} cells, about {found.requests:,} "
        "requests",
        *shape_lines(plan, found),
        describe(estimate(plan, found, base)),
    ]
    # the plan validated above, under its header of comments
    atomic.write_text(target, comments(header) + body)
    out.print(f"wrote {target}", highlight=False)
    for line in header[2:]:
        err.print(line, highlight=False, soft_wrap=True)
