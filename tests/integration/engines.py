"""Helpers shared by the integration tests that start real engines."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from servediff.analysis.findings import Summary
from servediff.engines.process import group_members
from servediff.report.words import claim_text, signature_text

# Prose, code, JSON and German, 52 to 195 tokens: enough to see drift and to check agreement
# between engines, small enough for 2 CPU cores (a pass of these on the embedded engine, one
# core of an AMD EPYC: 2.2 to 2.9 s; 4.4 to 5.3 s with the 686-token prose-essay-long in
# place of prose-essay-maps, 2026-12-02).
TAGS = ["prose-harbour", "code-python-lru", "json-event", "de-prose-wetter", "prose-essay-maps"]


def servediff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servediff", *args], capture_output=True,
                          text=True, cwd=cwd, check=False, timeout=1800)


@contextmanager
def servediff_running(*args: str, cwd: Path, **popen: object) -> Iterator[subprocess.Popen[str]]:
    """`servediff ARGS` started in the background. However the test ends, the process is
    gone and its pipes are closed afterwards (a failed assertion must not leave a run going,
    nor open files that a later test's ResourceWarning would be blamed for)."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    with subprocess.Popen([sys.executable, "-m", "servediff", *args], cwd=cwd, text=True,
                          **popen) as proc:  # type: ignore[call-overload]
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def assert_started(run: Path) -> None:
    """Every launch of the run became ready. An engine that could not start fails the test
    with servediff's record of it: the error, the exit code or signal, the log tail."""
    for path in sorted((run / "loads").glob("*.json")):
        for launch in json.loads(path.read_text())["launches"]:
            if launch["seconds_to_ready"] is None and not launch["external"]:
                stop = launch["stop"] or {}
                pytest.fail(f"{path.stem} attempt {launch['attempt']}: the engine never became "
                            f"ready: {launch['error']}\nexit code {stop.get('returncode')}, "
                            f"signal {stop.get('signal')}; log tail:\n{stop.get('log_tail')}")


def run_plan(work: Path, plan: str) -> Path:
    (work / "plan.toml").write_text(plan)
    done = servediff("run", "plan.toml", "--out", "run", cwd=work)
    assert_started(work / "run")
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    return work / "run"


def rows(run: Path, arm: str, load: int, probe: str = "score") -> dict[str, dict]:
    cell = json.loads((run / "cells" / f"{arm}-load{load}-{probe}.json").read_text())
    return {r["tag"]: r for r in cell["records"]}


def listeners(port: int) -> list[int | None]:
    """The pids listening on this TCP port (None: a process this user may not see)."""
    return [c.pid for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]


def assert_all_stopped(run: Path) -> None:
    """Every launch was stopped cleanly: group gone, port closed, nothing left running."""
    for path in sorted((run / "loads").glob("*.json")):
        for launch in json.loads(path.read_text())["launches"]:
            stop = launch["stop"]
            assert stop is not None, path
            assert stop["port_closed"] and stop["group_gone"], (path, stop)
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", launch["port"])) == 0:
                    # The tests run side by side: another test's engine may since have been
                    # given the same free port. It may listen there only if it was started
                    # after this load's record was written (the stop came before that).
                    for pid in listeners(launch["port"]):
                        assert pid is not None and psutil.Process(pid).create_time() > \
                            path.stat().st_mtime, (path, launch["port"], pid)
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
# The grid: each request sent 4 times at each level, so level 4 is one wave of 4 in flight
# and level 2 two waves of 2 (96 requests with 8 per level; 48 now).
CONCURRENCY = ("[probes.concurrency]\nenabled = true\nlengths = [64, 256]\nlevels = [1, 2, 4]\n"
               "requests = 4\nmax_tokens = 8\n")


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
    assert sorted({n for _, n, _ in got}) == [64, 256]
    assert sorted({c for _, _, c in got}) == [1, 2, 4]
    control = all(v["distinct"] == 1 for (_, n, c), v in expected.items() if c == 1)
    assert conc["control_ok"] is control
    return summary


CORPUS = f"[corpus]\ntags = {json.dumps(TAGS)}\n"
# llama-server's exact scoring costs n^2/2 prompt tokens per text of n tokens (about 170
# prompt tokens/s on an AVX2 core pair, 2026-12-01): its plans score the two shortest texts,
# prose and JSON (39 and 52 tokens: 2,110 prompt tokens a pass).
SHORT = ["prose-short-storm", "json-event"]
SHORT_CORPUS = f"[corpus]\ntags = {json.dumps(SHORT)}\n"


def hf_plan() -> str:
    """The embedded engine in float32 on every text the vLLM and llama-server tests score:
    the reference their per-text numbers are checked against."""
    tags = json.dumps(sorted(set(TAGS) | set(SHORT)))
    return ('name = "hf"\nengine = "transformers"\nmodel = "smollm2"\nloads_per_arm = 1\n'
            '[engine_options]\ndevice = "cpu"\n[arms.fp32]\n[probes.repeat]\ncount = 0\n'
            f"[corpus]\ntags = {tags}\n" + DRIFT_ONLY)


def check_rows_valid(run: Path) -> None:
    for path in (run / "cells").glob("*.json"):
        for r in json.loads(path.read_text())["records"]:
            assert r["status"] == "ok", (path.name, r["error"])
            assert len(r["token_logprobs"]) == r["n_tokens"] - 1
            assert r["server_prompt_tokens"] in (None, r["n_tokens"])
            assert r["sum_nll"] == -math.fsum(r["token_logprobs"])


def check_summary_against_rows(run: Path, arm: str, tags: list[str] = TAGS) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    data = summary["arms"][arm]
    (pair,) = data["across_load"]
    a, b = rows(run, arm, 1), rows(run, arm, 2)
    deltas = [b[t]["sum_nll"] - a[t]["sum_nll"] for t in tags]
    assert pair["moved"] == sum(d != 0 for d in deltas)
    assert pair["max_abs_delta"] == max(abs(d) for d in deltas)
    return summary


# The cost protocol with a small context: speed (3 replicates), prefix reuse, and a
# sweep that reaches the context length and goes past it.
COST = ("[probes.speed]\nprompt_tokens = [128]\nmax_tokens = 8\nreplicates = 3\n"
        "levels = [1, 2]\n"
        "[probes.sweep]\nstart = 256\nlevels = [1, 2]\nrequest_timeout_s = 300\n"
        "[probes.prefix]\nprefix_tokens = 400\nquestion_tokens = 16\nrequests = 3\n"
        + MARK_BUSY)


def check_sweep(run: Path, arm: str, context: int, limit: int | None = None) -> dict:
    """The sweep reached the context and went past it; the summary's map is the raw one.
    `limit`: the longest prompt the engine accepts, below the context (SGLang): held there,
    and refused with HTTP 400 (the server alive) at the context's own point."""
    summary = json.loads((run / "summary.json").read_text())
    cell = json.loads((run / "cells" / f"{arm}-cost1-sweep.json").read_text())
    assert cell["context_length"] == context
    raw = {(p["length"], p["level"]): p for p in cell["sweep"]}
    assert [tuple(x) for x in cell["sweep_plan"]] == list(raw)
    top = context - 1 if limit is None else limit
    assert (top, 1) in raw and raw[(top, 1)]["outcome"] == "ok"
    if limit is not None:
        refused = raw[(context - 1, 1)]
        assert refused["outcome"] == "error" and refused["http_status"] == 400, refused
    beyond = [p for (n, _), p in raw.items() if n > context]
    assert beyond and all(p["outcome"] == "error" and p["http_status"] == 400 for p in beyond)
    ok = [p for p in raw.values() if p["outcome"] == "ok"]
    assert all(p["achieved_ok"] is not False for p in ok)
    # every sweep prompt is unique from its first token, or, where the test corpus has too
    # few distinct tokens for the numbers drawn, from its second (prompts.py): a prefix
    # cache spares at most that one token (SGLang reports it; vLLM caches whole blocks)
    assert all(c in (0, 1, None) for p in ok for c in p["cached_tokens"]), ok
    survival = summary["costs"][arm]["survival"]
    assert {(p["length"], p["level"]): p["outcome"] for p in survival["points"]} == \
        {k: p["outcome"] for k, p in raw.items()}
    assert survival["largest_ok_length"]["1"] == top
    if limit is None:
        assert all(v is None for v in survival["first_failure"].values())
    else:
        assert survival["first_failure"]["1"]["length"] == context - 1
    alone, together = summary["costs"][arm]["speed"]["per_length"]
    assert (alone["concurrency"], together["concurrency"]) == (1, 2)
    for speed in (alone, together):
        assert speed["replicates"] == 3 and speed["decode_tok_s"]["mean"] > 0
    raw = json.loads((run / "cells" / f"{arm}-cost1-speed.json").read_text())["speed"]
    # 2 at once: one replicate per pair of requests, with the output of both over the wall
    pairs = [s for s in raw if s["concurrency"] == 2 and not s["warmup"]]
    assert len(pairs) == 3 and all(s["throughput_tok_s"] > 0 for s in pairs)
    assert_all_stopped(run)
    return summary


def vllm_plan(python: Path, work: Path) -> str:
    """vLLM CPU in float32 with a 2,048-token context: an `eager` arm (`--enforce-eager`) and
    a `compiled` one (torch.compile, fresh caches every load), drift scoring only. The eager
    arm's loads share one vLLM cache root: it compiles nothing, and what vLLM keeps there
    (its model inspection, otherwise done in a subprocess that imports vLLM again, about
    20 s a start here) holds no numerics."""
    (work / "tmp").mkdir(exist_ok=True)
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}",
               "--host", "{host}", "--port", "{port}", "--max-model-len", "2048",
               "--dtype", "float32"]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(work / "vllm-cache"),
           "TMPDIR": str(work / "tmp")}
    return ('name = "vllm"\nengine = "vllm"\nmodel = "smollm2"\nloads_per_arm = 2\n'
            f"[launch]\ncommand = {json.dumps(command)}\n"
            "env = { " + ", ".join(f'{k} = {json.dumps(v)}' for k, v in env.items()) + " }\n"
            '[arms.eager]\nargs = ["--enforce-eager"]\ncache_policy = "shared"\n'
            '[arms.compiled]\n'
            "[probes.repeat]\ncount = 1\n" + CORPUS + DRIFT_ONLY)
