"""Turning pydantic validation errors into one line that names file and field.

`plan.toml: arms.pinned.args[2]: must be a string` rather than a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError


def field_path(loc: Sequence[int | str], prefix: str = "") -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


_MESSAGES = {
    "extra_forbidden": "unknown key",
    "missing": "required key is missing",
}


def describe(exc: ValidationError, source: str, prefix: str = "") -> str:
    """All errors of `exc`, one per line, each `source: field: message`."""
    lines = []
    for err in exc.errors():
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        msg = _MESSAGES.get(err["type"], err["msg"])
        if err["type"] == "literal_error":
            msg = err["msg"].replace("Input should be", "must be")
        lines.append(f"{source}: {field_path(loc, prefix)}: {msg}")
    return "\n".join(lines)
