"""Fuzzed input (hypothesis): plan TOML, score files for `compare`, and the run-directory
files that `report` and `rederive` read. Every case must end with exit 0, 1 or 2 and, for
an error, one line saying what was wrong; never a traceback (an exception out of the CLI).
The commands run in-process, as `servediff` would run them, for the number of cases."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servediff.cli import main
from servediff.cli import run as run_command
from servediff.derived import write_derived
from tests.fixtures.bundles import cell, make_bundle

FUZZ = settings(max_examples=400, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


class Accepted(Exception):
    """A plan that validated: `run` would now start its engines."""


def servediff(*argv: str) -> tuple[int, str]:
    """`servediff ARGV` in this process: its exit code and what it wrote to stderr. Any
    exception other than SystemExit is what a user would see as a traceback: it fails."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
        except Accepted:
            code = 0
    return code, stderr.getvalue()


def check(code: int, stderr: str, *, diff_ok: bool = False) -> None:
    assert code in (0, 1, 2), (code, stderr)
    assert "Traceback" not in stderr, stderr
    if code == 2 or (code == 1 and not diff_ok):
        said = [x for x in stderr.splitlines() if x.startswith("error:")]
        assert len(said) == 1, stderr


@contextlib.contextmanager
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


# --- plan TOML ------------------------------------------------------------------------

KEYS = ["engine", "model", "name", "loads_per_arm", "cost_loads_per_arm", "base_url",
        "comparisons", "cross_machine", "args", "env", "options", "command", "cache_policy",
        "count", "enabled", "tags", "max_texts", "prompt_tokens", "levels", "replicates",
        "max_tokens", "mode", "request_rate", "requests", "start", "require", "threshold_abs_nll",
        "device", "dtype", "stop_grace_s", "start_timeout_s", "action", "wait_s", "bogus"]
TABLES = ["", "arms.a", "arms.b", "factors.f", "engine_options", "launch", "corpus",
          "probes.repeat", "probes.speed", "probes.sweep", "probes.concurrency", "ship",
          "quiet", "scale", "scoring", "arms", "probes"]
SCALARS = st.one_of(
    st.sampled_from(["transformers", "vllm", "llamacpp", "sglang", "smollm2", "cpu", "steady",
                     "burst", "fresh", "shared", "${HF_TOKEN}", "", "org/name@main"]),
    st.text(max_size=12), st.integers(-5, 10_000), st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False, width=32))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=4),
                   st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=3))


def toml_value(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if "e" in repr(value) or "." in repr(value) else f"{value}.0"
    return json.dumps(value)  # a TOML basic string or an integer


PLAN_SECTIONS = st.lists(st.tuples(st.sampled_from(TABLES), st.dictionaries(
    st.sampled_from(KEYS), VALUES, max_size=4)), max_size=5)
BASE = 'engine = "transformers"\nmodel = "smollm2"\n'


@FUZZ
@given(sections=PLAN_SECTIONS, base=st.booleans(), cut=st.integers(0, 400))
def test_fuzzed_plans_end_with_an_exit_code_and_a_line(
        sections: list[tuple[str, dict[str, object]]], base: bool, cut: int):
    head = BASE if base else ""
    body = "".join((f"[{table}]\n" if table else "")
                   + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items())
                   for table, keys in sections)
    text = head + body
    if cut % 5 == 0:  # now and then cut short, anywhere
        text = text[: cut % (len(text) + 1)]
    with folder() as tmp, pytest.MonkeyPatch.context() as mp:
        def accepted(*args: object, **kwargs: object) -> None:
            raise Accepted
        mp.setattr(run_command, "announce", accepted)
        (tmp / "plan.toml").write_text(text)
        check(*servediff("run", str(tmp / "plan.toml"), "--out", str(tmp / "run")))


@FUZZ
@given(data=st.binary(max_size=200))
def test_plan_files_of_any_bytes_end_with_an_exit_code_and_a_line(data: bytes):
    with folder() as tmp:
        (tmp / "plan.toml").write_bytes(data)
        check(*servediff("run", str(tmp / "plan.toml"), "--out", str(tmp / "run")))


# --- score files for compare -----------------------------------------------------------

JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                              st.floats(allow_nan=False, allow_infinity=False)),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.sampled_from(["tag", "sum_nll", "token_ids", "x"])
                                      | st.text(max_size=5), inner, max_size=4),
                    max_leaves=12)
ROWS = st.lists(st.fixed_dictionaries({"tag": st.text(max_size=6) | st.integers(),
                                       "sum_nll": st.floats() | st.text(max_size=4)
                                       | st.none()}), max_size=5)
SCORE_FILE = st.one_of(
    JSON.map(json.dumps),
    ROWS.map(lambda rows: "\n".join(json.dumps(r) for r in rows)),  # JSONL
    st.dictionaries(st.text(max_size=6), st.floats() | st.integers() | st.none(),
                    max_size=5).map(json.dumps),
    st.text(max_size=80))


@FUZZ
@given(a=SCORE_FILE, b=SCORE_FILE, fail_on_moved=st.booleans())
def test_fuzzed_score_files_end_with_an_exit_code_and_a_line(a: str, b: str,
                                                             fail_on_moved: bool):
    with folder() as tmp:
        (tmp / "a.json").write_text(a)
        (tmp / "b.jsonl").write_text(b)
        flags = ["--fail-on-moved"] if fail_on_moved else []
        code, stderr = servediff("compare", str(tmp / "a.json"), str(tmp / "b.jsonl"), *flags)
        # exit 1 with --fail-on-moved is the gate's answer, not an error
        check(code, stderr, diff_ok=fail_on_moved)


# --- run-directory files ------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "run"
    make_bundle(root, [cell(a, n) for a in ("a", "b") for n in (1, 2)]
                + [cell(a, n, "repeat", 1) for a in ("a", "b") for n in (1, 2)])
    write_derived(root)
    assert servediff("rederive", str(root))[0] == 0
    return root


def mutate(text: str, how: int, where: int, value: object) -> str:
    """Cut the file short, put another value in place of one of its values, or write
    something else entirely."""
    if how == 0:
        return text[: where % (len(text) + 1)]
    if how == 1:
        try:
            doc = json.loads(text)
        except ValueError:
            return text
        node, path = doc, []
        while isinstance(node, dict | list) and node:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            key = keys[where % len(keys)]
            path.append((node, key))
            where //= max(len(keys), 1)
            node = node[key]
            if where == 0:
                break
        if path:
            parent, key = path[-1]
            parent[key] = value
        return json.dumps(doc)
    return json.dumps(value)


@FUZZ
@given(which=st.integers(0, 10_000), how=st.integers(0, 2), where=st.integers(0, 10**9),
       value=JSON)
def test_fuzzed_run_directories_end_with_an_exit_code_and_a_line(
        bundle: Path, which: int, how: int, where: int, value: object):
    files = sorted(p for p in bundle.rglob("*.json") if p.is_file())
    with folder() as tmp:
        run = tmp / "run"
        shutil.copytree(bundle, run)
        target = run / files[which % len(files)].relative_to(bundle)
        target.write_text(mutate(target.read_text(), how, where, value))
        for command in ("rederive", "report"):
            # rederive's exit 1 names the values that differ from summary.json
            check(*servediff(command, str(run)), diff_ok=command == "rederive")
