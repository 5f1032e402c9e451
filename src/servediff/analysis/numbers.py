"""The numbers a summary holds, as flat paths, and where two summaries differ.

`servediff rederive` compares the re-derived summary with `summary.json`.
Within one schema version every value must be equal. A `summary.json`
written by an earlier servediff (schema 1) said its signatures, claims, gaps
and reasons in sentences; later versions hold them as structures and add
fields (docs/summary.md, "Schema history", says which).
Across versions, then, the comparison is over the
numbers and identifiers: every leaf of the older summary outside those
sentence fields must be found, equal, at the same path in the newer one.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import JsonValue

# Fields that schema 1 held as sentences (or lists of them).
WORDS = frozenset({"signature", "signature_meaning", "headline", "text", "regime", "fix",
                   "coverage", "gaps", "untested", "reason"})

Leaf = str | int | float | bool | None


def leaves(data: JsonValue, path: str = "", skip: frozenset[str] = frozenset()
           ) -> Iterator[tuple[str, Leaf]]:
    """(path, value) of every leaf; keys in `skip` are left out with all below them."""
    if isinstance(data, dict):
        if not data:
            yield path, "{}"
        for key in sorted(data):
            if key not in skip:
                yield from leaves(data[key], f"{path}.{key}" if path else str(key), skip)
    elif isinstance(data, list):
        if not data:
            yield path, "[]"
        for i, item in enumerate(data):
            yield from leaves(item, f"{path}[{i}]", skip)
    else:
        yield path, data


def differences(stored: JsonValue, derived: JsonValue, limit: int = 5) -> tuple[int, list[str]]:
    """(leaves compared, the first `limit` differences as "path: stored -> derived").

    Same schema version: every leaf of both. An older stored summary: its leaves outside
    the sentence fields, each looked up in the derived one."""
    old = stored.get("schema_version") if isinstance(stored, dict) else None
    new = derived.get("schema_version") if isinstance(derived, dict) else None
    skip = WORDS if old != new else frozenset()
    a = dict(leaves(stored, skip=skip | {"schema_version"}))
    b = dict(leaves(derived, skip=skip | {"schema_version"}))
    paths = sorted(a) if old != new else sorted(set(a) | set(b))
    out = []
    for path in paths:
        if path not in b:
            out.append(f"{path}: {a[path]!r} -> (missing)")
        elif path not in a:
            out.append(f"{path}: (missing) -> {b[path]!r}")
        elif a[path] != b[path]:
            out.append(f"{path}: {a[path]!r} -> {b[path]!r}")
    return len(paths), out[:limit] if limit else out
