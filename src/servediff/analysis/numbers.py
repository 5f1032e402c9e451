"""The numbers a summary holds, as flat paths, and where two summaries differ.

`servediff rederive` compares the re-derived summary with `summary.json`.
Within one schema version every value must be equal. A `summary.json`
written by an earlier servediff (schema 1) said its signatures, claims, gaps
and reasons in sentences; later versions hold them as structures and add
fields (docs/summary.md, "Schema history", says which).
Across versions, then, the comparison is over the
numbers and identifiers: every leaf of the older summary outside those
sentence fields must be found, equal, at the same path in the newer one.
Where a version moved a finding (`upgrade`), the older summary is first
read in today's shape; an item of a list may have moved within its list
(a claim now listed after others), so it is found wherever it stands.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

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


def upgrade(stored: dict[str, Any]) -> dict[str, Any]:
    """An older summary in today's shape, where a version moved what it holds.

    Schema 17: the prefix probe's finding left `costs.<arm>.prefix` for
    `probe_findings.prefix.arms.<arm>`, and its claims and factor property became those
    of a probe with a finding of its own (topic "probe"); the numbers they held are the
    finding's."""
    out = copy.deepcopy(stored)
    version = int(out.get("schema_version") or 0)
    if version >= 17:
        return out
    arms = {arm: c.pop("prefix") for arm, c in (out.get("costs") or {}).items()
            if isinstance(c, dict) and "prefix" in c}
    if found := {arm: p for arm, p in arms.items() if p is not None}:
        out.setdefault("probe_findings", {})["prefix"] = {"arms": found}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        if node.get("topic") == "prefix" and "cached_a" in node:
            return {"topic": "probe", "kind": node["kind"], "evidence": node["evidence"],
                    "probe": "prefix", "baseline": node["baseline"], "arm": node["arm"],
                    "severe": True,
                    "compared": node["cached_a"] is not None or node["cached_b"] is not None}
        if node.get("topic") == "prefix":
            return {**node, "topic": "probe", "probe": "prefix"}
        return {k: walk(v) for k, v in node.items()}

    walked: dict[str, Any] = walk(out)
    return walked


def _across(old: Any, new: Any, path: str, skip: frozenset[str], out: list[str]) -> int:
    """Every leaf of `old` looked up in `new` (differences appended to `out`); a list's item
    is matched with the new item at its index, else with any equal one of the list."""
    if isinstance(old, dict) and old:
        count = 0
        for key in sorted(old):
            if key in skip:
                continue
            sub = f"{path}.{key}" if path else str(key)
            if not isinstance(new, dict) or key not in new:
                missing = list(leaves(old[key], sub, skip))
                out += [f"{p}: {v!r} -> (missing)" for p, v in missing]
                count += len(missing)
            else:
                count += _across(old[key], new[key], sub, skip, out)
        return count
    if isinstance(old, list) and old:
        if not isinstance(new, list):
            missing = list(leaves(old, path, skip))
            out += [f"{p}: {v!r} -> (missing)" for p, v in missing]
            return len(missing)
        count, used = 0, set()
        for i, item in enumerate(old):
            sub = f"{path}[{i}]"
            ahead = [i] if i < len(new) else []
            for j in (j for j in [*ahead, *range(len(new))] if j not in used):
                trial: list[str] = []
                compared = _across(item, new[j], sub, skip, trial)
                if not trial:  # found, equal, at j
                    used.add(j)
                    count += compared
                    break
            else:
                if ahead:
                    count += _across(item, new[i], sub, skip, out)
                else:
                    missing = list(leaves(item, sub, skip))
                    out += [f"{p}: {v!r} -> (missing)" for p, v in missing]
                    count += len(missing)
        return count
    value = "{}" if old == {} else "[]" if old == [] else old
    theirs = "{}" if new == {} else "[]" if new == [] else new
    if value != theirs:
        out.append(f"{path}: {value!r} -> {theirs!r}")
    return 1


def differences(stored: JsonValue, derived: JsonValue, limit: int = 5) -> tuple[int, list[str]]:
    """(leaves compared, the first `limit` differences as "path: stored -> derived").

    Same schema version: every leaf of both, at the same path. An older stored summary,
    read in today's shape (`upgrade`): its leaves outside the sentence fields, each looked
    up in the derived one."""
    old = stored.get("schema_version") if isinstance(stored, dict) else None
    new = derived.get("schema_version") if isinstance(derived, dict) else None
    out: list[str] = []
    if old != new and isinstance(stored, dict):
        count = _across(upgrade(stored), derived, "", WORDS | {"schema_version"}, out)
        return count, out[:limit] if limit else out
    a = dict(leaves(stored, skip=frozenset({"schema_version"})))
    b = dict(leaves(derived, skip=frozenset({"schema_version"})))
    paths = sorted(set(a) | set(b))
    for path in paths:
        if path not in b:
            out.append(f"{path}: {a[path]!r} -> (missing)")
        elif path not in a:
            out.append(f"{path}: (missing) -> {b[path]!r}")
        elif a[path] != b[path]:
            out.append(f"{path}: {a[path]!r} -> {b[path]!r}")
    return len(paths), out[:limit] if limit else out
