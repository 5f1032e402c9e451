"""What changed between two builds' source trees: the files, and the diff of those that
matter.

`servediff bisect` compares the source of the last good build with the first bad one's
(each unpacked by the engine's build source). Every file that differs is listed with
its added and removed lines. The ones that matter are the changed files outside what
cannot change a served number: documentation, tests, examples, CI and editor files, web
UIs, bindings or build helpers for other languages, and what the engine's build source
names as left out of its build (another GPU backend, another tool). Their unified diff is the
answer's `flip.diff`. Where every changed file is of those kinds, none is narrowed away
and the diff covers all of them.
"""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict

# path parts and suffixes of files that cannot change what a server computes
ASIDE_PARTS = frozenset({"docs", "doc", "test", "tests", "examples", "example", ".github",
                         ".devops", "ci", "media", "webui", "public", "public_legacy",
                         "benchmarks", "bench", "gguf-py", "grammars", "prompts", "licenses"})
ASIDE_SUFFIXES = (".md", ".txt", ".rst", ".png", ".jpg", ".svg", ".gif", ".yml", ".yaml",
                  ".nix", ".ipynb", ".html", ".css", ".js", ".ts", ".tsx", ".json",
                  ".swift", ".kt", ".java", ".sh", ".bat", ".ps1")
ASIDE_NAMES = frozenset({"CMakeLists.txt"})  # kept: a build flag can change numbers


class ChangedFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    status: Literal["added", "removed", "changed"]
    added: int
    removed: int
    # whether the file can change what the server computes (source, not docs or tests)
    matters: bool


class SourceChanges(BaseModel):
    """The files that differ from `a` (the last good build) to `b` (the first bad)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    a: str
    b: str
    files: list[ChangedFile]
    # the file the diff was written to, relative to the bisection's folder
    diff: str | None = None

    def mattering(self) -> list[ChangedFile]:
        narrowed = [f for f in self.files if f.matters]
        return narrowed or self.files


def matters(path: str, aside: tuple[str, ...] = ()) -> bool:
    """Whether a changed file can change what the server computes; `aside`: path prefixes
    the engine's build source knows cannot (code its build leaves out)."""
    if path.startswith(aside):
        return False
    p = PurePosixPath(path)
    if p.name in ASIDE_NAMES:
        return True
    if any(part.lower() in ASIDE_PARTS for part in p.parts[:-1]):
        return False
    return not p.name.lower().endswith(ASIDE_SUFFIXES) and not p.name.startswith(".")


def _files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _lines(path: Path | None) -> list[str]:
    if path is None:
        return []
    try:
        return path.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return ["(binary file)\n"]


def compare_trees(a: Path, b: Path, name_a: str, name_b: str, aside: tuple[str, ...] = ()
                  ) -> tuple[SourceChanges, str]:
    """The files that differ from tree `a` to tree `b`, and the unified diff of those that
    matter (of all of them where none does); `aside` as for `matters`."""
    files_a, files_b = _files(a), _files(b)
    changed: list[ChangedFile] = []
    hunks: dict[str, list[str]] = {}
    for path in sorted(files_a.keys() | files_b.keys()):
        if files_a.get(path) == files_b.get(path):
            continue
        old = _lines(a / path if path in files_a else None)
        new = _lines(b / path if path in files_b else None)
        diff = list(difflib.unified_diff(old, new, f"{name_a}/{path}", f"{name_b}/{path}",
                                         n=3))
        status: Literal["added", "removed", "changed"] = (
            "added" if path not in files_a else "removed" if path not in files_b
            else "changed")
        changed.append(ChangedFile(
            path=path, status=status, matters=matters(path, aside),
            added=sum(1 for x in diff if x.startswith("+") and not x.startswith("+++")),
            removed=sum(1 for x in diff if x.startswith("-") and not x.startswith("---"))))
        hunks[path] = diff
    changes = SourceChanges(a=name_a, b=name_b, files=changed)
    text = "".join(line if line.endswith("\n") else line + "\n"
                   for f in changes.mattering() for line in hunks[f.path])
    return changes, text


def changes_text(changes: SourceChanges) -> str:
    """One line: how many files changed, and those that matter."""
    shown = changes.mattering()
    narrowed = len(shown) < len(changes.files)
    names = ", ".join(f"{f.path} (+{f.added} -{f.removed})" for f in shown[:8])
    more = f" and {len(shown) - 8} more" if len(shown) > 8 else ""
    count = len(changes.files)
    return (f"{changes.a} to {changes.b}: {count} file{'s' if count != 1 else ''} changed"
            + (f", {len(shown)} of them source that can change a served number" if narrowed
               else "") + (f": {names}{more}" if shown else ""))
