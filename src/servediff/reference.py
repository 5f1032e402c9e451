"""Every plan setting, written out from its own description: one source for its meaning.

Each setting of a plan and of every registered probe carries `Field(description=...,
examples=...)`. From them this module writes the annotated TOML that docs/plans.md
shows under "Every setting" (`scripts/plan_reference.py` puts it there; a test checks
that it is current) and the comments `servediff init` puts beside the settings it
writes. A setting without a description, or without a value to show, is an error
here, so the reference cannot fall behind the code.
"""

from __future__ import annotations

import json
import textwrap
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from servediff import probes
from servediff.plan import Plan, ProbesSpec
from servediff.probes import settings as probe_settings

COMMENT_AT = 31  # the column where a setting's comment starts
WIDTH = 92


def toml_value(value: Any) -> str:
    """A TOML literal for the plain values a plan holds."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str | int | float):
        return json.dumps(value)
    raise TypeError(f"no TOML literal for {value!r}")


def line(text: str, description: str | None) -> list[str]:
    """`text` with its description as a comment beside it (under it, past a long value),
    wrapped."""
    if not description:
        return [text]
    pad = " " * COMMENT_AT
    parts = [f"# {p}" for p in textwrap.wrap(description, WIDTH - COMMENT_AT - 2,
                                                 break_on_hyphens=False)]
    if len(text) < COMMENT_AT:
        return [f"{text:<{COMMENT_AT}}{parts[0]}", *(pad + p for p in parts[1:])]
    return [text, *(pad + p for p in parts)]


def setting(name: str, value: Any, info: FieldInfo) -> list[str]:
    return line(f"{name} = {toml_value(value)}", info.description)


def shown(name: str, info: FieldInfo) -> Any:
    """The value the reference shows: the setting's first example, else its default."""
    if info.examples:
        return info.examples[0]
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    if info.default is PydanticUndefined or info.default is None:
        raise ValueError(f"setting {name}: no example and no default to show; give it "
                         "Field(examples=[...])")
    return info.default


def written(model: type[BaseModel], where: str) -> Iterator[tuple[str, FieldInfo]]:
    """The settings of `model` that a plan file holds (not those servediff sets), each
    checked to say what it means."""
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and extra.get("set_by_servediff"):
            continue
        if not info.description:
            raise ValueError(f"setting {where}{name}: no description; give it "
                             "Field(description=...)")
        yield name, info


def _table_of(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """("table", M) for a table of settings M, ("tables", M) for named tables of M."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table", annotation
    if typing.get_origin(annotation) is dict:
        value = typing.get_args(annotation)[1]
        if isinstance(value, type) and issubclass(value, BaseModel):
            return "tables", value
    return None


def section(header: str, description: str | None, model: type[BaseModel],
            where: str) -> list[str]:
    out = ["", *line(header, description)]
    for name, info in written(model, where):
        out += setting(name, shown(where + name, info), info)
    return out


def settings_reference() -> str:
    """Every setting of a plan, as annotated TOML: the top-level settings first, then each
    table in the plan's order, the probes' in the registry's."""
    top: list[str] = []
    tables: list[str] = []
    for name, info in written(Plan, ""):
        kind = _table_of(info.annotation)
        if info.annotation is ProbesSpec:
            for settings in probe_settings.sections():
                sec = settings.section
                tables += section(f"[probes.{sec}]", probes.by_section(sec).description,
                                  settings, f"probes.{sec}.")
        elif kind is None and typing.get_origin(info.annotation) is dict:
            tables += ["", *line(f"[{name}]", info.description)]
            tables += [f"{k} = {toml_value(v)}" for k, v in shown(name, info).items()]
        elif kind is None:
            top += setting(name, shown(name, info), info)
        else:
            header = f"[{name}]" if kind[0] == "table" else f"[{name}.NAME]"
            tables += section(header, info.description, kind[1], f"{name}.")
    return "\n".join([*top, *tables]) + "\n"
