"""Seeded kill trials: SIGKILL at random moments, resume, and check what is left.

    python3 scripts/kill_trials.py --trials 50 [--seed 0] [--work DIR] [--json FILE]

Each trial runs a small embedded-engine plan (one arm, two cold loads, two short texts
scored and scored again) in a folder of its own. On each of its first 1 to 3 attempts
(seeded) one SIGKILL goes at a seeded moment to one target: servediff itself, the
engine's supervisor (the process that leads the engine's group) or the engine. The
moment is a phase and an offset into it; the phase the run was really in when the
signal went is what is counted. After each attempt the same command is run again,
until the run completes. Then:

- `servediff verify` passes and `servediff rederive` equals summary.json;
- every planned cell exists exactly once, each with one record per text, and none was
  measured again once it was finished (its bytes never changed between attempts);
- no process the run started is alive and nothing of it listens on a port;
- nothing was moved aside as damaged: no half-written file was ever left as a cell.

It prints a table (trials, faults by target and by phase, cells lost, cells duplicated,
orphans) and exits 1 when any goal is missed. tests/integration/test_kill_trials.py runs
5 trials of it in CI; docs/reliability.md has a 50-trial table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from servediff.cli.run import INCOMPLETE
from servediff.engines.groups import group_members

TARGETS = ("servediff", "supervisor", "engine")
# The phases of a run, in order. `resume`: a later attempt's start before its first engine
# launch (the check of cells, the reaping of launches left without a stop, the lock);
# `start` is the same on the first attempt. `cell written`: a cell file is on disk and
# its manifest entry not yet. `stop`: the load's last cell is done, its engine is being
# stopped and recorded. `report`: every cell and stop is recorded; the summary and the
# reports are being written.
PHASES = ("start", "resume", "engine start", "measure", "cell written", "stop", "report")
ENGINE_PHASES = ("engine start", "measure", "cell written", "stop")
# How far into each phase a signal may go (seconds); a phase that ends sooner is counted
# as the one the run was in when the signal went.
OFFSET_S = {"start": 0.9, "resume": 0.9, "engine start": 4.0, "measure": 1.0,
            "cell written": 0.005, "stop": 0.4, "report": 1.5}
ARM, LOADS, CELLS = "a", 2, ("score", "repeat-r1")
TAGS = ["prose-short-storm", "json-event"]
PLAN = f"""
engine = "transformers"
model = "smollm2"
loads_per_arm = {LOADS}
[engine_options]
device = "cpu"
threads = 1
[arms.{ARM}]
[corpus]
tags = {json.dumps(TAGS)}
[probes.repeat]
count = 1
[launch]
stop_grace_s = 5
""" + "".join(f"[probes.{p}]\nenabled = false\n"
              for p in ("concurrency", "generate", "speed", "sweep", "prefix"))
EXPECTED = sorted(f"{ARM}-load{n}-{c}" for n in range(1, LOADS + 1) for c in CELLS)
ATTEMPT_TIMEOUT_S = 900.0


@dataclass
class Fault:
    target: str
    phase: str  # the phase aimed at
    offset_s: float
    hit: str | None = None  # the phase the run was in when the signal went (None: no kill)


@dataclass
class Trial:
    number: int
    faults: list[Fault] = field(default_factory=list)
    attempts: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unsent: int = 0
    given_up: int = 0  # runs that ended with a load given up, measured on the resume


def draw(rng: random.Random) -> Fault:
    target = rng.choice(TARGETS)
    # servediff's start twice as often: on a later attempt it is the resume, the phase
    # only a servediff killed before can give
    phase = rng.choice(ENGINE_PHASES if target != "servediff" else
                       ("start", "start", *(p for p in PHASES if p not in ("start", "resume"))))
    return Fault(target, phase, rng.uniform(0.0, OFFSET_S[phase]))


class Watch:
    """One attempt of `servediff run`: its stderr lines as they come, the processes it
    started, and the phase it is in."""

    def __init__(self, work: Path, attempt: int) -> None:
        self.work, self.run, self.attempt = work, work / "run", attempt
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "servediff", "run", "plan.toml", "--out", "run"],
            cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.seen: dict[int, float] = {}  # every descendant seen: pid -> create time
        self.cells_before = set(self.cell_names())
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def cell_names(self) -> list[str]:
        return sorted(p.stem for p in (self.run / "cells").glob("*.json"))

    def processes(self) -> dict[str, psutil.Process]:
        """The supervisor and the engine running now (either may be missing)."""
        found: dict[str, psutil.Process] = {}
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return found
        for child in children:
            try:
                self.seen.setdefault(child.pid, child.create_time())
                command = " ".join(child.cmdline())
                parent = child.ppid()
            except psutil.Error:
                continue
            if "servediff.engines.supervise" in command:
                found["supervisor"] = child
            elif parent != self.proc.pid:
                found.setdefault("engine", child)
        return found

    def phase(self) -> str:
        """The phase the run is in now (`start` and `resume`: the same one, named by
        whether this is the first attempt)."""
        finished = [x for x in self.lines if x.endswith("s") and ": done in " in x]
        done = {x.split("] ", 1)[1].split(":")[0] for x in finished if "] " in x}
        if set(self.cell_names()) - self.cells_before - done:
            return "cell written"
        if set(EXPECTED) <= set(self.cell_names()) and self.stops_recorded():
            return "report"
        for line in reversed(self.lines):
            if ": cold start" in line:
                return "engine start"
            if ": ready in " in line or line.endswith(" steps"):
                return "measure"
            if ": done in " in line:
                return "stop" if line.split("] ", 1)[1].split(":")[0].endswith(CELLS[-1]) \
                    else "measure"
        return "start" if self.attempt == 1 else "resume"

    def stops_recorded(self) -> bool:
        try:
            return all(x["stop"] is not None for p in (self.run / "loads").glob("*.json")
                       for x in json.loads(p.read_text())["launches"])
        except (OSError, ValueError, KeyError):
            return False

    def alive(self) -> bool:
        return self.proc.poll() is None


def strike(watch: Watch, fault: Fault) -> None:
    """Wait for the fault's phase, then its offset, then SIGKILL its target; the phase
    the run was in at that moment is recorded."""
    entered: float | None = None
    targets: dict[str, psutil.Process] = {}
    looked = 0.0
    while watch.alive():
        now, phase = time.monotonic(), watch.phase()
        if now - looked > 0.05 or (fault.target != "servediff" and fault.target not in targets):
            targets, looked = watch.processes(), now  # psutil is slow: not every round
        aimed = "start" if phase == "resume" else phase  # a resume: a later attempt's start
        if entered is None and aimed == fault.phase:
            entered = now
        if entered is not None and now - entered >= fault.offset_s:
            victim = (psutil.Process(watch.proc.pid) if fault.target == "servediff"
                      else targets.get(fault.target))
            if victim is not None:
                fault.hit = watch.phase()
                try:
                    victim.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    fault.hit, targets = None, {}
                    continue
                return
        time.sleep(0.0005 if fault.phase == "cell written" else 0.005)


def finish(watch: Watch) -> int:
    deadline = time.monotonic() + ATTEMPT_TIMEOUT_S
    while watch.alive() and time.monotonic() < deadline:
        watch.processes()
        time.sleep(0.05)
    if watch.alive():
        watch.proc.kill()
    code = watch.proc.wait()
    watch.reader.join(timeout=30)
    assert watch.proc.stderr is not None
    watch.proc.stderr.close()
    return code


def orphans(watch: Watch, grace_s: float = 30.0) -> list[str]:
    """What the attempt started and is still alive once it ended (after the grace its
    supervisors are given to take their groups down), and who listens on its ports."""
    launches = [x for p in (watch.run / "loads").glob("*.json")
                for x in json.loads(p.read_text())["launches"]]
    ports = {x["port"] for x in launches}
    deadline = time.monotonic() + grace_s
    while True:
        left = []
        for pid, created in watch.seen.items():
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"pid {pid} ({' '.join(proc.cmdline())[:80]})")
            except psutil.Error:
                continue
        listening = [f"port {c.laddr.port} (pid {c.pid})"
                     for c in psutil.net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports
                     and c.pid in watch.seen]
        # and by the groups the records name (a process spawned after the last look)
        grouped = [f"group {x['pgid']}: pid {pid}" for x in launches if x.get("pgid")
                   for pid in group_members(x["pgid"]) if pid not in watch.seen]
        if not (left or listening or grouped) or time.monotonic() > deadline:
            return left + listening + grouped
        time.sleep(0.2)


def digests(run: Path) -> dict[str, str]:
    return {p.stem: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (run / "cells").glob("*.json")}


def servediff(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servediff", *args], cwd=work,
                          capture_output=True, text=True, check=False, timeout=900)


def trial(number: int, seed: int, root: Path) -> Trial:
    rng = random.Random(f"{seed}:{number}")
    result = Trial(number)
    work = root / f"trial-{number:03d}"
    work.mkdir(parents=True)
    (work / "plan.toml").write_text(PLAN)
    pending = [draw(rng) for _ in range(rng.randint(1, 3))]
    for i in range(1, len(pending)):
        # after a kill of servediff, now and then the next one during the resume: the
        # moment only a servediff killed before gives (its start, on a later attempt)
        if pending[i - 1].target == "servediff" and rng.random() < 0.5:
            pending[i] = Fault("servediff", "start", rng.uniform(0.0, OFFSET_S["resume"]))
    began, finished = time.monotonic(), {}
    complete = False
    while not complete and result.attempts < len(pending) + len(result.faults) + 4:
        result.attempts += 1
        watch = Watch(work, result.attempts)
        # the faults one after another while this attempt lives (servediff goes on after
        # its engine or supervisor is killed); one it did not reach waits for the next
        while pending and watch.alive():
            strike(watch, pending[0])
            if pending[0].hit is not None:
                result.faults.append(pending.pop(0))
        code = finish(watch)
        result.orphans += [f"attempt {result.attempts}: {x}" for x in orphans(watch)]
        for name, digest in digests(work / "run").items():
            if finished.setdefault(name, digest) != digest:
                result.duplicated.append(name)
                finished[name] = digest
        # servediff gives a load up after launch.max_attempts launches in a row that
        # measured nothing (an engine that cannot be served is a finding, not a loop) and
        # ends the run with the gap named; the same command measures it again
        cells = {p.stem for p in (work / "run" / "cells").glob("*.json")}
        complete = code == 0 and set(EXPECTED) <= cells
        if code == INCOMPLETE:  # exit 5 names the cells; their loads were given up
            result.given_up += 1
    if not complete:
        result.problems.append(f"the run did not complete in {result.attempts} attempts")
    result.unsent = len(pending)  # drawn, but the run had completed before their moment
    run = work / "run"
    cells = sorted(p.stem for p in (run / "cells").glob("*.json"))
    result.lost = [x for x in EXPECTED if x not in cells]
    result.problems += [f"cell not in the plan: {x}" for x in cells if x not in EXPECTED]
    for name in cells:
        tags = [r["tag"] for r in json.loads((run / "cells" / f"{name}.json").read_text())
                ["records"]]
        if sorted(tags) != sorted(TAGS):
            result.problems.append(f"{name}: records {tags}, planned {TAGS}")
    damaged = sorted(p.name for p in (run / ".damaged").glob("*")) \
        if (run / ".damaged").exists() else []
    result.problems += [f"moved aside as damaged: {x}" for x in damaged]
    for command in ("verify", "rederive"):
        done = servediff(work, command, "run")
        if done.returncode != 0:
            result.problems.append(f"{command}: exit {done.returncode}: "
                                   f"{(done.stderr or done.stdout).strip()[-300:]}")
    result.duplicated = sorted(set(result.duplicated))
    result.seconds = time.monotonic() - began
    return result


def table(trials: list[Trial]) -> str:
    hit = [f for t in trials for f in t.faults]
    by_target = Counter(f.target for f in hit)
    by_phase = Counter(f.hit for f in hit)
    rows = [
        ("trials", str(len(trials))),
        ("attempts", str(sum(t.attempts for t in trials))),
        ("faults sent", f"{len(hit)} (drawn, not sent once the run had completed: "
                        f"{sum(t.unsent for t in trials)})"),
        *[(f"faults at {x}", str(by_target[x])) for x in TARGETS],
        *[(f"faults in phase {x}", str(by_phase[x])) for x in PHASES],
        ("runs that gave a load up (measured again on resume)",
         str(sum(t.given_up for t in trials))),
        ("cells lost", str(sum(len(t.lost) for t in trials))),
        ("cells duplicated", str(sum(len(t.duplicated) for t in trials))),
        ("orphans", str(sum(len(t.orphans) for t in trials))),
        ("other problems", str(sum(len(t.problems) for t in trials))),
        ("wall seconds", f"{sum(t.seconds for t in trials):.0f}"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"| {'':<{width}} | |", f"| {'-' * width} | --- |"]
    return "\n".join(lines + [f"| {k:<{width}} | {v} |" for k, v in rows])


def failures(trials: list[Trial]) -> list[str]:
    return [f"trial {t.number}: {what}: {x}" for t in trials
            for what, items in (("lost", t.lost), ("duplicated", t.duplicated),
                                ("orphan", t.orphans), ("problem", t.problems))
            for x in items]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="where the trials' runs go (default: a "
                        "new temporary folder, removed unless a trial failed)")
    parser.add_argument("--json", type=Path, help="write every trial's faults and findings")
    args = parser.parse_args(argv)
    root = args.work or Path(tempfile.mkdtemp(prefix="servediff-kill-trials-"))
    trials = []
    for number in range(1, args.trials + 1):
        done = trial(number, args.seed, root)
        trials.append(done)
        struck = ", ".join(f"{f.target} in {f.hit}" for f in done.faults) or "no fault"
        print(f"trial {number}/{args.trials}: {done.attempts} attempts, {struck}; "
              f"{done.seconds:.0f} s" + ("" if not failures([done]) else
                                         f"; FAILED: {'; '.join(failures([done]))}"),
              flush=True)
    print(table(trials))
    if args.json:
        args.json.write_text(json.dumps([t.__dict__ | {"faults": [f.__dict__ for f in t.faults]}
                                         for t in trials], indent=1))
    bad = failures(trials)
    for line in bad:
        print(line, file=sys.stderr)
    if not bad and args.work is None:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
