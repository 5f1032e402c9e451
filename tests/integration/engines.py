"""Helpers shared by the integration tests that start real engines."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from servediff.analysis.findings import Summary
from servediff.engines.process import group_members
from servediff.report.words import claim_text, signature_text

# Short and long, prose, code, JSON and German: enough to see drift and to
# check agreement between engines, small enough for 2 CPU cores.
TAGS = ["prose-harbour", "code-python-lru", "json-event", "de-prose-wetter", "prose-essay-long"]


def servediff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servediff", *args], capture_output=True,
                          text=True, cwd=cwd, check=False, timeout=1800)


def run_plan(work: Path, plan: str) -> Path:
    (work / "plan.toml").write_text(plan)
    done = servediff("run", "plan.toml", "--out", "run", cwd=work)
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    return work / "run"


def rows(run: Path, arm: str, load: int, probe: str = "score") -> dict[str, dict]:
    cell = json.loads((run / "cells" / f"{arm}-load{load}-{probe}.json").read_text())
    return {r["tag"]: r for r in cell["records"]}


def assert_all_stopped(run: Path) -> None:
    """Every launch was stopped cleanly: group gone, port closed, nothing left running."""
    for path in sorted((run / "loads").glob("*.json")):
        for launch in json.loads(path.read_text())["launches"]:
            stop = launch["stop"]
            assert stop is not None, path
            assert stop["port_closed"] and stop["group_gone"], (path, stop)
            with socket.socket() as sock:
                assert sock.connect_ex(("127.0.0.1", launch["port"])) != 0, path
            # checked again now, by pid and process group: nothing of it is alive
            assert group_members(launch["pid"]) == [], (path, launch["pid"])


def summary_of(run: Path) -> Summary:
    """The run's summary.json, typed."""
    return Summary.model_validate_json((run / "summary.json").read_text())


def signature(run: Path, arm: str) -> str:
    """The arm's drift signature as the report says it."""
    return signature_text(summary_of(run).arms[arm].signature)


def claims(run: Path, arm: str, kind: str) -> list[str]:
    """The verdict's claims of one kind in the pair that compares `arm`, as sentences."""
    (pair,) = [p for p in summary_of(run).verdict.pairs if p.arm == arm]
    return [claim_text(c) for c in pair.claims if c.kind == kind]


def probes_off(*names: str) -> str:
    """Plan TOML that switches these probes off (they are on by default)."""
    return "".join(f"[probes.{name}]\nenabled = false\n" for name in names)


# Cost loads on a machine the tests do not control (CI runs them beside other work): the
# quiet-box gate looks, does not wait, and marks instead of refusing.
MARK_BUSY = '[quiet]\naction = "mark"\nwait_s = 0\nwindow_s = 1\n'

# Drift scoring only: every other probe off. Tests that want one put it back.
CONC_OFF = probes_off("concurrency")
DRIFT_ONLY = probes_off("concurrency", "generate") + probes_off("speed", "sweep", "prefix")
CONCURRENCY = ("[probes.concurrency]\nenabled = true\nlengths = [64, 512]\nlevels = [1, 2, 4]\n"
               "requests = 8\nmax_tokens = 8\n")


def check_concurrency_table(run: Path, arm: str, kinds: list[str]) -> dict:
    """The summary's request x length x concurrency table, recomputed from the raw hashes:
    above level 1 the control's (level-1) result counts as one of the distinct results,
    and `off_control` counts the responses that are not it."""
    from collections import Counter

    summary = json.loads((run / "summary.json").read_text())
    conc = summary["arms"][arm]["concurrency"]
    expected: dict[tuple[str, int, int], dict[str, int]] = {}
    for path in sorted((run / "cells").glob(f"{arm}-load*-concurrency.json")):
        groups = json.loads(path.read_text())["groups"]
        control = {(g["kind"], g["length"]): {r["hash"] for r in g["responses"]}
                   for g in groups if g["level"] == 1}
        for group in groups:
            hashes = Counter(r["hash"] for r in group["responses"] if r["status"] == "ok")
            assert all(r["status"] == "ok" for r in group["responses"]), group
            alone = control.get((group["kind"], group["length"]), set())
            alone = alone if group["level"] > 1 and len(alone) == 1 else set()
            entry = expected.setdefault((group["kind"], group["length"], group["level"]),
                                        {"distinct": 0, "off_majority": 0, "off_control": 0})
            entry["distinct"] = max(entry["distinct"], len(set(hashes) | alone))
            entry["off_majority"] += sum(hashes.values()) - hashes.most_common(1)[0][1]
            entry["off_control"] += sum(n for h, n in hashes.items() if alone and h not in alone)
    got = {(e["kind"], e["length"], e["level"]): {"distinct": e["distinct"],
                                                  "off_majority": e["off_majority"],
                                                  "off_control": e["off_control"]}
           for e in conc["table"]["cells"]}
    assert got == expected
    assert sorted({k for k, _, _ in got}) == sorted(kinds)
    assert sorted({n for _, n, _ in got}) == [64, 512]
    assert sorted({c for _, _, c in got}) == [1, 2, 4]
    control = all(v["distinct"] == 1 for (_, n, c), v in expected.items() if c == 1)
    assert conc["control_ok"] is control
    return summary
