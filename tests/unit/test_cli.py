"""The CLI as a user meets it: exit codes, one-line errors, no torch for --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.bundles import cell, make_bundle


def servediff(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servediff", *args], capture_output=True,
                          text=True, cwd=cwd, check=False, timeout=120)


def test_help_does_not_import_torch():
    code = ("import sys; from servediff.cli import cli; "
            "from click.testing import CliRunner; r = CliRunner().invoke(cli, ['--help']); "
            "assert r.exit_code == 0, r.output; "
            "print(','.join(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ""


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        ("engine = \n", "invalid TOML"),
        ('engine = "vllm9"\nmodel = "smollm2"\n[arms.a]\n', "engine: unknown engine 'vllm9'"),
        ('engine = "transformers"\nmodel = "smollm2"\nbogus = 1\n[arms.a]\n',
         "bogus: unknown key"),
        ('engine = "transformers"\nmodel = "smollm2"\n[arms.a]\n[corpus]\nsource = "file"\n'
         'path = "missing.jsonl"\n', "missing.jsonl: corpus file not found"),
    ],
)
def test_bad_plan_exits_2_with_one_clear_line(tmp_path: Path, plan: str, expected: str):
    (tmp_path / "plan.toml").write_text(plan)
    done = servediff("run", "plan.toml", "--out", "out", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_plan_with_several_mistakes_names_them_all_with_near_misses(tmp_path: Path):
    (tmp_path / "plan.toml").write_text(
        'engine = "vlm"\nmodel = "smolm2"\nloads_per_armm = 2\n[arms.a]\n'
        "[probes.speed]\nreplicats = 3\n")
    done = servediff("run", "plan.toml", "--out", "out", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    for line in ("plan.toml: loads_per_armm: unknown key; did you mean 'loads_per_arm'?",
                 "plan.toml: probes.speed.replicats: unknown key; did you mean 'replicates'?",
                 "plan.toml: engine: unknown engine 'vlm'; known engines: llamacpp, openai, "
                 "sglang, transformers, vllm; did you mean 'vllm'?",
                 "plan.toml: model: 'smolm2' is neither a built-in model (smollm2), nor an "
                 "existing path, nor a hub id (`org/name` or `org/name@revision`); did you "
                 "mean 'smollm2'?"):
        assert line in done.stderr
    (tmp_path / "options.toml").write_text(
        'engine = "transformers"\nmodel = "smollm2"\n[engine_options]\ndtyp = "auto"\n'
        '[arms.a]\noptions = { attn_implementaton = "sdpa" }\n[arms.b]\n')
    done = servediff("run", "options.toml", "--out", "out", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("unknown key") == 2  # the shared mistake once, not per arm
    assert "engine_options.dtyp: unknown key; did you mean 'dtype'?" in done.stderr
    assert ("arms.a.options.attn_implementaton: unknown key; did you mean "
            "'attn_implementation'?") in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_big_new_run_from_a_script_needs_yes_and_every_run_says_its_size(tmp_path: Path):
    from servediff.probes import protocol_size

    # engine, model and two arms: the full default protocol
    (tmp_path / "big.toml").write_text(
        'engine = "transformers"\nmodel = "smollm2"\n[arms.a]\n'
        '[arms.b]\noptions = { attn_implementation = "eager" }\n')
    done = subprocess.run([sys.executable, "-m", "servediff", "run", "big.toml", "--out",
                           "out"], capture_output=True, text=True, cwd=tmp_path, check=False,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "protocol: 8 loads, 26 cells, about 1,584 requests (the sweep counted up to a " \
        "context of 8,192 tokens" in " ".join(done.stderr.split())
    # the bisection is not in the count (it runs only on a failure); its bound is said:
    # 4,096..8,191 halved to within 409 tokens (5 % of 8,191) is 4 prompts
    assert "a failure inside it adds up to 4 bisection prompts per sweep" in \
        " ".join(done.stderr.split())
    assert "rough estimate: about " in done.stderr and "135 M parameters" in done.stderr
    assert "big.toml: about 1,584 requests in 26 cells, more than 1,000" in done.stderr
    assert "pass --yes to start it" in done.stderr and not (tmp_path / "out").exists()
    # without a sweep, the size says nothing of one
    (tmp_path / "big.toml").write_text((tmp_path / "big.toml").read_text()
                                       + "[probes.sweep]\nenabled = false\n")
    done = subprocess.run([sys.executable, "-m", "servediff", "run", "big.toml", "--out",
                           "out"], capture_output=True, text=True, cwd=tmp_path, check=False,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert "protocol: 8 loads, " in done.stderr and "sweep" not in done.stderr
    # the count is the probes' own: the demo plan stays under the bar
    import tomllib
    from importlib import resources

    from servediff.plan import resolve_plan
    demo, corpus = resolve_plan(tomllib.loads(resources.files("servediff.plans").joinpath(
        "demo.toml").read_text()), "demo.toml", tmp_path)
    size = protocol_size(demo, corpus)
    assert (size.loads, size.cells, size.context) == (8, 22, 2048)
    assert 0 < size.requests <= 1000


def test_non_writable_output_folder(tmp_path: Path):
    if os.geteuid() == 0:
        target = "/proc/servediff-out"  # not writable even for root
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = str(locked / "run")
    (tmp_path / "plan.toml").write_text('engine = "transformers"\nmodel = "smollm2"\n[arms.a]\n')
    done = servediff("run", "plan.toml", "--out", target, cwd=tmp_path)
    assert done.returncode == 2
    assert "output folder is not writable" in done.stderr and "Traceback" not in done.stderr


def test_compare_cli(tmp_path: Path):
    (tmp_path / "a.json").write_text(json.dumps({"x": 1.0, "y": 2.0, "z": 3.0}))
    (tmp_path / "b.jsonl").write_text('{"tag": "x", "sum_nll": 1.0}\n{"tag": "y", "sum_nll": 2.5}\n'
                                      '{"tag": "w", "sum_nll": 9}\n')
    done = servediff("compare", "a.json", "b.jsonl", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["compared"], result["moved"], result["max_tag"]) == (2, 1, "y")
    assert result["max_abs_delta"] == 0.5
    assert result["only_a"] == ["z"] and result["only_b"] == ["w"]
    text = servediff("compare", "a.json", "b.jsonl", cwd=tmp_path).stdout
    assert "compared 2 texts: 1 moved" in text and "only in A (1): z" in text
    # CI can gate on it: 1 when a text moved, 0 when nothing did
    gated = servediff("compare", "a.json", "b.jsonl", "--fail-on-moved", cwd=tmp_path)
    assert gated.returncode == 1 and "1 moved" in gated.stdout
    assert servediff("compare", "a.json", "b.jsonl", "--fail-on-moved", "--json",
                     cwd=tmp_path).returncode == 1
    assert servediff("compare", "a.json", "b.jsonl", "--fail-on-moved", "--threshold", "0.5",
                     cwd=tmp_path).returncode == 0
    (tmp_path / "empty.json").write_text("[]")
    bad = servediff("compare", "a.json", "empty.json", cwd=tmp_path)
    assert bad.returncode == 2 and "empty.json: no usable rows" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_rederive_verify_scores_on_a_fixture_bundle(tmp_path: Path):
    root = make_bundle(tmp_path / "run", [cell("a", 1), cell("a", 1, "repeat", 1),
                                         cell("a", 2, shifts={"beta": 0.5}),
                                         cell("a", 2, "repeat", 1, shifts={"beta": 0.5})],
                       arms=("a",))
    assert servediff("report", str(root)).returncode == 0
    derived = servediff("rederive", str(root), "--json")
    assert derived.returncode == 0, derived.stderr
    assert json.loads(derived.stdout) == json.loads((root / "summary.json").read_text())
    table = servediff("rederive", str(root)).stdout
    assert "across-load only" in table and "1/4" in table
    assert servediff("verify", str(root)).returncode == 0
    listed = servediff("scores", str(root), "--json").stdout
    rows = [json.loads(line) for line in listed.splitlines()]
    assert len(rows) == 16
    for flag, value in (("--arm", "nosuch"), ("--load", "3")):
        unmatched = servediff("scores", str(root), flag, value)
        assert unmatched.returncode == 2 and "Traceback" not in unmatched.stderr
        assert f"no score rows match {flag} {value}; the run has arms a, loads 1, 2, probes " \
            "repeat, score" in unmatched.stderr
    assert {"arm", "load", "repeat", "tag", "token_ids", "sum_nll", "n_tokens"} <= set(rows[0])
    # where each row first differs from its reference: load 2 from load 1, a repeat from
    # its own load's pass (beta moved at its last position, 5, in load 2 only)
    where = {(r["load"], r["probe"], r["tag"]): (r["vs"], r["first_differs"], r["differing"])
             for r in rows}
    assert where[1, "score", "beta"] == (None, None, None)
    assert where[2, "score", "beta"] == ("a-load1-score", 5, 1)
    assert where[2, "score", "alpha"] == ("a-load1-score", None, 0)
    assert where[2, "repeat", "beta"] == ("a-load2-score", None, 0)
    listing = servediff("scores", str(root), "--load", "2", "--probe", "score").stdout
    beta = next(line for line in listing.splitlines() if "beta" in line)
    assert beta.rstrip(" │").endswith("5") and "first diff: the first position" in listing
    (root / "summary.json").write_text((root / "summary.json").read_text().replace("0.5", "0.25"))
    changed = servediff("rederive", str(root))
    # it names the first keys that differ, with the stored and the re-derived value
    assert changed.returncode == 1
    assert "arms.a.across_load[0].max_abs_delta: 0.25 -> 0.5" in changed.stderr
    failed = servediff("verify", str(root))
    assert failed.returncode == 1 and "summary.json: sha256 does not match" in failed.stderr
    # report must not re-hash (and so hide) a changed file
    refused = servediff("report", str(root))
    assert refused.returncode == 1 and "summary.json: sha256 does not match" in refused.stderr
    assert servediff("verify", str(root)).returncode == 1


@pytest.mark.parametrize("command", ["rederive", "verify", "report", "scores"])
def test_not_a_run_directory(tmp_path: Path, command: str):
    done = servediff(command, str(tmp_path))
    assert done.returncode == 2
    assert f"{tmp_path}: not a servediff run directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_early_drift_table_never_stops_a_run(capsys):
    from servediff.cli.progress import RichObserver

    def broken(done: list[str]) -> str:
        raise ValueError("no score cell yet")

    with RichObserver(on_drift=broken) as observer:
        observer.drift_finished(["a"], ["b"])  # a note, not an exception
    err = capsys.readouterr().err
    assert "drift table not shown yet: no score cell yet" in err
    with RichObserver(on_drift=lambda done: f"DRIFT TABLE OF {done}") as observer:
        observer.drift_finished(["b"], ["a"])
    err = capsys.readouterr().err
    assert "the drift loads of b are done; those of a are not all measured yet" in err
    assert "DRIFT TABLE OF ['b']" in err and "more drift loads come next" in err
    with RichObserver(on_drift=lambda done: "WHOLE TABLE") as observer:
        observer.drift_finished(["a", "b"], [])
    err = capsys.readouterr().err
    assert "WHOLE TABLE" in err and "the cost loads come next" in err
    assert "Drift so far" not in err


def test_the_early_drift_table_shows_only_the_arms_whose_drift_loads_are_done(tmp_path: Path):
    from servediff.analysis.summary import summarize
    from servediff.bundle import read_evidence
    from servediff.cli.run import only_arms

    # b has one of its two drift loads: its signature would come from one load
    root = make_bundle(tmp_path / "run", [cell("a", 1), cell("a", 2, shifts={"beta": 0.5}),
                                         cell("b", 1)], arms=("a", "b"))
    summary = summarize(read_evidence(root))
    assert set(summary.arms) == {"a", "b"} and summary.arm_shifts
    shown = only_arms(summary, ["a"])
    assert set(shown.arms) == {"a"} and shown.arm_shifts == []
    assert shown.arms["a"] == summary.arms["a"]


@pytest.mark.parametrize("engine", ["transformers", "vllm", "llamacpp", "sglang"])
def test_init_writes_a_plan_that_validates_with_its_size_and_estimate(tmp_path: Path,
                                                                      engine: str):
    import tomllib

    from servediff.plan import load_plan_file
    from servediff.probes import protocol_size
    from servediff.probes.speed import SpeedSettings

    done = servediff("init", engine, "smollm2", "--out", "plans/mine.toml", "--size", "small",
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "plans" / "mine.toml"
    plan, corpus = load_plan_file(path)
    assert (plan.name, plan.engine, plan.model, list(plan.arms)) == (
        "mine", engine, "smollm2", ["baseline", "candidate"])
    assert plan.arms["baseline"] != plan.arms["candidate"]
    size = protocol_size(plan, corpus)
    text = path.read_text()
    header = " ".join(line[1:].strip() for line in text.splitlines() if line.startswith("#"))
    assert (f"protocol: {size.loads} loads, {size.cells} cells, about {size.requests:,} "
            "requests") in header and "rough estimate: about " in header
    # small: the demo's grids; full: the defaults
    assert tomllib.loads(text)["probes"]["speed"]["prompt_tokens"] == [512]
    # the commented factor example, taken in place of the arms, is a factor plan
    factor = text.split("# [factors.candidate]")[1]
    rest = factor.split("\n\n", 1)[1]
    as_factors = text.split("[arms.baseline]")[0] + "[factors.candidate]" + "".join(
        line.removeprefix("# ") + "\n" for line in factor.split("\n\n")[0].splitlines()) \
        + "\n" + rest
    (tmp_path / "factors.toml").write_text(as_factors)
    factored = load_plan_file(tmp_path / "factors.toml")[0]
    assert list(factored.arms) == ["baseline", "candidate"]
    assert factored.arms["candidate"].factors == ["candidate"]
    again = servediff("init", engine, "smollm2", "--out", "plans/mine.toml", cwd=tmp_path)
    assert again.returncode == 2 and "exists; pass --force" in again.stderr
    full = servediff("init", engine, "smollm2", "--out", "full.toml", "--size", "full",
                     cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    full = load_plan_file(tmp_path / "full.toml")[0]
    assert full.probes.get(SpeedSettings).prompt_tokens == [512, 2048]


def test_init_writes_a_model_path_as_seen_from_the_plan(tmp_path: Path):
    from servediff.plan import load_plan_file

    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "model.gguf").write_bytes(b"\0" * 4096)
    done = servediff("init", "llamacpp", "models/tiny/model.gguf", "--out", "plans/p.toml",
                     "--size", "small", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan, _ = load_plan_file(tmp_path / "plans" / "p.toml")
    assert plan.model == "../models/tiny/model.gguf"
    # its size read from the file: 4,096 bytes at 2 bytes a parameter
    assert "0 M parameters (its weight files' size at 2 bytes a parameter)" in done.stderr
    wrong = servediff("init", "vllm", "./models/none", "--out", "v.toml", cwd=tmp_path)
    assert wrong.returncode == 2 and "neither a built-in model" in wrong.stderr
    assert not (tmp_path / "v.toml").exists()
    # an absolute path is written as given, not as ../../ from the plan's folder
    done = servediff("init", "llamacpp", str(model / "model.gguf"), "--out", "plans/a.toml",
                     "--size", "small", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert load_plan_file(tmp_path / "plans" / "a.toml")[0].model == str(model / "model.gguf")


def test_init_takes_a_hub_id_for_an_engine_that_loads_one(tmp_path: Path):
    from servediff.plan import load_plan_file

    for given in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-0.6B@main"):
        done = servediff("init", "vllm", given, "--out", "plans/p.toml", "--size", "small",
                         "--force", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert load_plan_file(tmp_path / "plans" / "p.toml")[0].model == given
        assert f"model = \"{given}\"" in (tmp_path / "plans" / "p.toml").read_text()
    # llama-server serves a GGUF file: a hub id is refused with what to give instead
    refused = servediff("init", "llamacpp", "meta-llama/Llama-3.1-8B", "--out", "l.toml",
                        cwd=tmp_path)
    assert refused.returncode == 2
    assert "`llamacpp` is not given hub ids (servediff gives them to vllm, sglang" in \
        " ".join(refused.stderr.split())
    # a folder of that name beside the plan is the folder, not a hub id
    (tmp_path / "plans" / "org" / "name").mkdir(parents=True)
    (tmp_path / "plans" / "org" / "name" / "model.gguf").write_bytes(b"\0" * 4096)
    done = servediff("init", "llamacpp", "org/name/model.gguf", "--out", "g.toml",
                     "--size", "small", cwd=tmp_path / "plans")
    assert done.returncode == 0, done.stderr


def test_engines_wraps_its_cells_on_a_narrow_terminal_instead_of_cutting_them():
    done = subprocess.run([sys.executable, "-m", "servediff", "engines"], capture_output=True,
                          text=True, check=False, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    joined = "".join(line.split("│")[3].strip() for line in done.stdout.splitlines()
                     if line.count("│") == 6)
    assert "servediff.engines.hf_server" in joined


def test_every_command_s_help_shows_an_example():
    from click.testing import CliRunner

    from servediff.cli import COMMANDS, cli

    for name in COMMANDS:
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, result.output
        assert f"Example: servediff {name}" in result.output, name


@pytest.mark.parametrize(("dtype", "native", "source"), [
    ("float32", True, "float32"), ("auto", False, "float32"), ("auto", True, "bf16"),
    ("bfloat16", False, "bf16"), (None, True, "float32")])  # the embedded engine's default
def test_the_estimate_uses_the_rates_of_the_dtype_the_engine_will_compute_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str | None, native: bool,
        source: str):
    # the demo in float32 took 443 s on the machine whose bf16 rates said 244 s: a CPU
    # without native bf16 ("auto" there is float32) gets float32 rates
    import tomllib
    from importlib import resources

    from servediff import estimate
    from servediff.plan import resolve_plan
    from servediff.probes import protocol_size

    monkeypatch.setattr(estimate, "native_bf16", lambda: native)
    monkeypatch.setattr(estimate, "on_gpu", lambda plan: False)
    raw = tomllib.loads(resources.files("servediff.plans").joinpath("demo.toml").read_text())
    raw["engine_options"].pop("dtype")
    if dtype is not None:
        raw["engine_options"]["dtype"] = dtype
    plan, corpus = resolve_plan(raw, "demo.toml", tmp_path)
    found = estimate.estimate(plan, protocol_size(plan, corpus), tmp_path)
    assert not isinstance(found, str)
    assert f"a 2-core CPU, {source}," in found.basis
    bf16 = estimate.estimate(plan.model_copy(update={"engine_options": {
        **plan.engine_options, "dtype": "bfloat16"}}), protocol_size(plan, corpus), tmp_path)
    assert not isinstance(bf16, str)
    assert found.seconds / bf16.seconds == (pytest.approx(1.61, abs=0.05)
                                            if source == "float32" else 1.0)
