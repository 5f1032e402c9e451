"""The run directory (evidence bundle): where each file lives, reading it back, hashes.

    runs/<run-id>/
      plan.lock.json                 canonical plan + corpus + sha256
      loads/<arm>-load<N>.json       launch and stop records (cost loads: <arm>-cost<N>)
      cells/<arm>-load<N>-<probe>[-r<k>].json
      partial/<cell>-a<attempt>.json rows measured before an engine died mid-cell
      partial/<cell>-progress.json   a sweep's points so far (until the sweep is complete)
      logs/<arm>-load<N>.log         engine stdout/stderr
      confirmation.json              a design's confirmation: the factors it measures next
      cost_loads.json                cost loads the adaptive rule added, per round
      summary.json                   derived (analysis)
      report.md                      derived (report)
      manifest.json                  sha256 of every file above
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from servediff import atomic
from servediff.corpus import Corpus
from servediff.errors import (
    BundleError,
    IntegrityError,
    OutputDirError,
    PlanMismatchError,
    SchemaVersionError,
)
from servediff.evidence import SCHEMA_VERSION, UPGRADED, Cell, LoadRecord
from servediff.plan import LOCK_SCHEMA_VERSION, LockedPlan, Plan, digest, plan_diff

MANIFEST_SCHEMA_VERSION = 1
_T = TypeVar("_T", Cell, LoadRecord)


def read_versioned(path: Path, expected: int, older: tuple[int, ...] = ()) -> dict[str, Any]:
    """Read a JSON file written by servediff, checking its schema_version (`expected`, or
    one of the `older` ones its model upgrades)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise SchemaVersionError(f"{path}: no schema_version; not a servediff file")
    if data["schema_version"] != expected and data["schema_version"] not in older:
        raise SchemaVersionError(
            f"{path}: schema_version {data['schema_version']!r}; this servediff reads "
            f"version {expected}"
        )
    return data


@dataclass(frozen=True)
class Layout:
    """Every evidence path of a run directory; nothing else spells one. `*_ref` are the
    paths relative to the run directory, as reports cite them."""

    root: Path

    @staticmethod
    def cell_ref(name: str) -> str:
        return f"cells/{name}.json"

    @staticmethod
    def load_ref(name: str) -> str:
        return f"loads/{name}.json"

    @staticmethod
    def progress_ref(name: str) -> str:
        return f"partial/{name}-progress.json"

    @staticmethod
    def partial_ref(name: str, attempt: int) -> str:
        return f"partial/{name}-a{attempt}.json"

    def cell(self, name: str) -> Path:
        return self.root / self.cell_ref(name)

    def partial(self, name: str, attempt: int) -> Path:
        """Rows of a cell whose engine died before the cell finished."""
        return self.root / self.partial_ref(name, attempt)

    def progress(self, name: str) -> Path:
        """A sweep's points so far, until the sweep cell is complete."""
        return self.root / self.progress_ref(name)

    def load(self, name: str) -> Path:
        return self.root / self.load_ref(name)

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def damaged(self, name: str) -> Path:
        """Where a cell file that is not a whole cell is moved aside, to be measured again."""
        return self.root / ".damaged" / name

    def loads(self) -> list[Path]:
        """Every load record, in name order."""
        return sorted((self.root / "loads").glob("*.json"))

    def cells(self) -> list[Path]:
        """Every complete cell, in name order."""
        return sorted((self.root / "cells").glob("*.json"))

    def partials(self, cell: str = "") -> list[Path]:
        """The partial files (rows before a death, a sweep's progress), of one cell or of
        all, in name order."""
        return sorted((self.root / "partial").glob(f"{cell}-*.json" if cell else "*.json"))

    @property
    def lock(self) -> Path:
        return self.root / "plan.lock.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def html(self) -> Path:
        return self.root / "report.html"

    @property
    def confirmation(self) -> Path:
        return self.root / "confirmation.json"

    @property
    def cost_loads(self) -> Path:
        return self.root / "cost_loads.json"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"


@contextmanager
def exclusive(root: Path) -> Iterator[None]:
    """Hold the run directory for one servediff at a time (an advisory lock on a hidden
    file, released when the process ends, however it ends)."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".servediff-run.lock").open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputDirError(f"{root}: another servediff is running in this run "
                                 "directory; wait for it or use another --out") from None
        yield


def write_lock(root: Path, locked: LockedPlan) -> None:
    """Write the lock, or check that the one already there is the same plan. The lock
    already there is kept as it is: the run keeps its identity (sha256) across upgrades."""
    path = Layout(root).lock
    if path.exists():
        existing = read_lock(root)
        if not existing.same_run(locked):
            raise PlanMismatchError(
                f"{path}: this run directory is locked under another plan "
                f"(sha256 {existing.sha256[:12]} vs {locked.sha256[:12]}); "
                "use a new --out folder. Difference:\n" + plan_diff(existing, locked)
            )
        return
    atomic.write_json(path, {"schema_version": LOCK_SCHEMA_VERSION, "sha256": locked.sha256,
                             **locked.canonical()})


def factor_order(factors: dict[str, Any], arms: dict[str, Any]) -> dict[str, Any]:
    """The factors in the plan's order, which the sorted lock file loses: the order names
    the arms they make (serial+eager, not eager+serial). The design puts each factor's
    arm of its own in that order (plan.design), and the arm order is kept."""
    alone = [arm["factors"][0] for arm in arms.values() if len(arm.get("factors") or []) == 1]
    rank = {name: alone.index(name) if name in alone else len(alone) for name in factors}
    return {name: factors[name] for name in sorted(factors, key=rank.__getitem__)}


def read_lock(root: Path) -> LockedPlan:
    """The locked plan; its sha256 is checked against the content exactly as stored, so a
    lock written by an earlier servediff (whose plan had fewer keys) still checks."""
    path = Layout(root).lock
    if not path.exists():
        raise BundleError(f"{root}: not a servediff run directory (no plan.lock.json)")
    data = read_versioned(path, LOCK_SCHEMA_VERSION)
    try:
        stored = {"plan": data["plan"], "arm_order": data["arm_order"],
                  "corpus": data["corpus"],
                  **({"factor_order": data["factor_order"]} if "factor_order" in data else {})}
        if digest(stored) != data["sha256"]:
            raise BundleError(f"{path}: the stored sha256 does not match the plan it holds")
        plan = dict(data["plan"])
        plan["arms"] = {name: plan["arms"][name] for name in data["arm_order"]}
        if "factor_order" in data:
            plan["factors"] = {name: plan["factors"][name] for name in data["factor_order"]}
        elif plan.get("factors"):
            plan["factors"] = factor_order(plan["factors"], plan["arms"])
        return LockedPlan(plan=Plan.model_validate(plan),
                          corpus=Corpus.model_validate(data["corpus"]), sha256=data["sha256"])
    except (ValidationError, KeyError, TypeError) as exc:
        raise BundleError(f"{path}: not a valid plan lock ({exc})") from None


@dataclass(frozen=True)
class Evidence:
    """Everything the measuring stage wrote, parsed; the input of analysis."""

    locked: LockedPlan
    loads: tuple[LoadRecord, ...]
    cells: tuple[Cell, ...]
    # Cells cut short by an engine death: kept as evidence, not compared.
    partial: tuple[Cell, ...] = ()

    @property
    def plan(self) -> Plan:
        return self.locked.plan

    @property
    def arms(self) -> list[str]:
        """The arms in the plan's order (the first is the baseline)."""
        return list(self.locked.plan.arms)


CONFIRMATION_SCHEMA_VERSION = 1


def write_confirmation(root: Path, factors: list[str] | None, why: str) -> None:
    """What a design's confirmation measures (None: nothing; `why` says why)."""
    atomic.write_json(Layout(root).confirmation, {
        "schema_version": CONFIRMATION_SCHEMA_VERSION, "factors": factors, "why": why})


def read_confirmation(root: Path) -> tuple[list[str] | None, str] | None:
    """(factors, why) of the run's confirmation; None before it was decided."""
    path = Layout(root).confirmation
    if not path.exists():
        return None
    data = read_versioned(path, CONFIRMATION_SCHEMA_VERSION)
    factors = data.get("factors")
    if not (factors is None or (isinstance(factors, list)
                                and all(isinstance(f, str) for f in factors))):
        raise BundleError(f"{path}: `factors` must be a list of factor names or null")
    return factors, str(data.get("why", ""))


COST_LOADS_SCHEMA_VERSION = 1


def write_cost_rounds(root: Path, rounds: list[dict[str, Any]]) -> None:
    """The adaptive rule's rounds: each with every arm's cost loads after it (`loads`) and
    the comparisons that asked for them (`unsure`: arm -> what was unsure)."""
    atomic.write_json(Layout(root).cost_loads, {
        "schema_version": COST_LOADS_SCHEMA_VERSION, "rounds": rounds})


def read_cost_rounds(root: Path) -> list[dict[str, Any]]:
    path = Layout(root).cost_loads
    if not path.exists():
        return []
    rounds = read_versioned(path, COST_LOADS_SCHEMA_VERSION).get("rounds")
    if not (isinstance(rounds, list) and all(
            isinstance(r, dict) and isinstance(r.get("loads"), dict)
            and all(isinstance(n, int) for n in r["loads"].values()) for r in rounds)):
        raise BundleError(f"{path}: `rounds` must be a list of {{loads: {{arm: count}}, "
                          "unsure: ...}}")
    return rounds


def as_run(root: Path, plan: Plan) -> Plan:
    """The plan as it runs: the locked one, plus what the run added once it had seen its
    loads (the confirmation arm, cost loads of the adaptive rule)."""
    found = read_confirmation(root)
    if found is not None and found[0] is not None and plan.confirmation is None:
        try:
            plan = plan.confirmed(found[0])
        except ValidationError as exc:
            raise BundleError(f"{Layout(root).confirmation}: not an arm of this plan "
                              f"({exc.errors()[0]['msg']})") from None
    rounds = read_cost_rounds(root)
    if rounds and plan.cost_loads is None:
        try:
            plan = plan.model_validate({**plan.model_dump(), "cost_loads": rounds[-1]["loads"]})
        except ValidationError as exc:
            raise BundleError(f"{Layout(root).cost_loads}: not this plan's arms "
                              f"({exc.errors()[0]['msg']})") from None
    return plan


def read_evidence(root: Path) -> Evidence:
    locked = read_lock(root)
    locked = locked.model_copy(update={"plan": as_run(root, locked.plan)})
    layout = Layout(root)
    loads = tuple(_parse(p, LoadRecord) for p in layout.loads())
    cells = tuple(_parse(p, Cell) for p in layout.cells())
    partial = tuple(_parse(p, Cell) for p in layout.partials())
    return Evidence(locked=locked, loads=loads, cells=cells, partial=partial)


def read_record(path: Path, model: type[_T]) -> _T:
    """One cell or load record, schema version and shape checked."""
    return _parse(path, model)


def _parse(path: Path, model: type[_T]) -> _T:
    data = read_versioned(path, SCHEMA_VERSION, UPGRADED)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BundleError(f"{path}: does not match the {model.__name__} schema: {exc}") from None


# sha256 by (path, inode, size, mtime): every bundle write replaces its file (atomic.py),
# so a file not rewritten since it was last hashed keeps its key, and a manifest rewritten
# after each load hashes only what the load added (git's index does the same)
_HASHED: dict[tuple[str, int, int, int], str] = {}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hash(path: Path) -> str:
    """A bundle file's sha256 as servediff last wrote it (verify() reads every byte)."""
    stat = path.stat()
    key = (str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = _sha256(path)
    return _HASHED[key]


def _bundle_files(root: Path) -> dict[str, Path]:
    """Every file of the bundle by its path inside it, in order; hidden ones (a run's
    lock, its JIT caches under .jit/) are not evidence, and their folders are not walked."""
    found: dict[str, Path] = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        inside = os.path.relpath(folder, root)
        for name in names:
            if name.startswith(".") or (inside == "." and name == "manifest.json"):
                continue
            path = Path(folder, name)
            if path.is_file():
                found[name if inside == "." else f"{inside}/{name}"] = path
    return dict(sorted(found.items(), key=lambda item: item[0].split("/")))  # as Paths sort


DERIVED = ("summary.json", "report.md", "report.html")


def evidence_sha256(root: Path) -> str:
    """One hash over every raw file of the bundle (derived files left out), the way
    the manifest lists them: what a report cites as the evidence it came from."""
    lines = "".join(f"{name} {_hash(p)}\n" for name, p in _bundle_files(root).items()
                    if name not in DERIVED)
    return hashlib.sha256(lines.encode()).hexdigest()


def write_manifest(root: Path) -> None:
    files = {name: _hash(p) for name, p in _bundle_files(root).items()}
    atomic.write_json(Layout(root).manifest,
                      {"schema_version": MANIFEST_SCHEMA_VERSION, "files": files})


def verify(root: Path) -> int:
    """Check every file against the manifest; raise naming each mismatch."""
    layout = Layout(root)
    if not layout.manifest.exists() and not layout.lock.exists():
        raise BundleError(f"{root}: not a servediff run directory (no manifest.json, no "
                          "plan.lock.json)")
    manifest = read_versioned(layout.manifest, MANIFEST_SCHEMA_VERSION)
    recorded: dict[str, str] = manifest["files"]
    present = _bundle_files(root)
    problems = []
    for name, sha in sorted(recorded.items()):
        if name not in present:
            problems.append(f"{name}: missing")
        elif _sha256(present[name]) != sha:
            problems.append(f"{name}: sha256 does not match the manifest")
    problems += [f"{name}: not in the manifest" for name in sorted(set(present) - set(recorded))]
    if problems:
        raise IntegrityError(f"{root}: {len(problems)} file(s) fail verification:\n  "
                             + "\n  ".join(problems))
    return len(recorded)
