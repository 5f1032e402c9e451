"""Turning pydantic validation errors into one line that names file and field.

`plan.toml: arms.pinned.args[2]: must be a string` rather than a traceback.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError


def field_path(loc: Sequence[int | str], prefix: str = "") -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


# A rule of the whole model names its field first: "comparisons: no such arm 'x'".
NAMED = re.compile(r"^[A-Za-z_][\w.\[\]+]*: ")

_MESSAGES = {
    "extra_forbidden": "unknown key",
    "missing": "required key is missing",
}


def suggest(word: str, known: Sequence[str]) -> str:
    """`; did you mean "x"?` for a near miss among `known`, else ""."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _kind_at(model: type[BaseModel] | None, loc: Sequence[int | str]) -> object:
    """What the model holds at `loc`: a model, a named table's value type, or a value."""
    kind: object = model
    for part in loc:
        kind = _fields_of(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(part))
            kind = field.annotation if field else None
        elif typing.get_origin(kind) is dict:
            kind = typing.get_args(kind)[1]  # the value type of a named table
        else:
            return None
        # X | None: the model inside
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1:
            kind = args[0]
    return _fields_of(kind)


def keys_at(model: type[BaseModel] | None, loc: Sequence[int | str]) -> list[str]:
    """The keys the model accepts at `loc` (a table inside it), or [] where it takes any."""
    kind = _kind_at(model, loc)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def meaning(model: type[BaseModel] | None, loc: Sequence[int | str]) -> str:
    """` (name: what it means)` for the setting at `loc` (an item of it too), from its Field
    description (the text docs/plans.md shows); "" where it has none."""
    names = list(loc)
    while names and isinstance(names[-1], int):
        names.pop()
    if not names:
        return ""
    holder = _kind_at(model, names[:-1])
    if isinstance(holder, type) and issubclass(holder, BaseModel):
        field = holder.model_fields.get(str(names[-1]))
        if field is not None and field.description:
            return f" ({names[-1]}: {field.description})"
    return ""


def _fields_of(kind: object) -> object:
    """A model whose fields are made at run time (plan.ProbesSpec: the registered probes)
    names the model that holds them."""
    made = getattr(kind, "fields_model", None)
    return made() if callable(made) else kind


def describe(exc: ValidationError, source: str, prefix: str = "",
             model: type[BaseModel] | None = None, only: Sequence[Any] | None = None) -> str:
    """All errors of `exc` (or `only` these of them), one per line, each `source: field:
    message`; an unknown key of `model` gets the nearest known one."""
    lines = []
    for err in only if only is not None else exc.errors():
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        msg = _MESSAGES.get(err["type"], err["msg"])
        if err["type"] == "value_error":  # a validator's own words, without pydantic's prefix
            msg = msg.removeprefix("Value error, ")
        if err["type"] == "literal_error":
            msg = err["msg"].replace("Input should be", "must be")
        if err["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
            msg += suggest(loc[-1], keys_at(model, loc[:-1]))
        if err["type"] == "value_error" and NAMED.match(msg):
            named, msg = msg.split(": ", 1)
            loc = [*loc, *named.split(".")]
        elif err["type"] not in ("extra_forbidden", "missing"):
            msg += meaning(model, loc)
        lines.append(f"{source}: {field_path(loc, prefix)}: {msg}")
    return "\n".join(lines)
