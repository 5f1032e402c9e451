from __future__ import annotations

from pathlib import Path

import pytest

from servediff.bundle import read_lock, write_lock
from servediff.errors import BundleError, CorpusError, PlanError, PlanMismatchError
from servediff.plan import load_plan_file, lock

GOOD = """
name = "t"
engine = "transformers"
model = "smollm2"
[arms.b]
options = { batch_size = 4 }
[arms.a]
args = ["--threads", "1"]
"""


def test_good_plan_gets_defaults_and_builtin_corpus(write):
    plan, corpus = load_plan_file(write("p.toml", GOOD))
    assert list(plan.arms) == ["b", "a"]
    assert plan.loads_per_arm == 2
    assert plan.thresholds.moved_abs_nll == 0.0
    assert plan.scoring.prefix == "bos"
    assert len(corpus.texts) >= 40


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('engine = "transformers"\nmodel = "smollm2"\n[arms.a\n', "invalid TOML"),
        (GOOD + "colour = 1\n", "colour: unknown key"),
        (GOOD + "[arms.c]\nflags = []\n", "arms.c.flags: unknown key"),
        (GOOD.replace('name = "t"', 'loads_per_arm = "two"'), "loads_per_arm:"),
        (GOOD.replace('"--threads", "1"', '"--threads", 1'), "arms.a.args[1]:"),
        (GOOD.replace('"transformers"', '"tensorrt"'), "engine: unknown engine 'tensorrt'"),
        (GOOD.replace("batch_size = 4", 'dtype = "int4"'), "arms.b.options.dtype: must be"),
        (GOOD.replace("batch_size = 4", "beam = 4"), "arms.b.options.beam: unknown key"),
        (GOOD.replace('model = "smollm2"', 'model = "no/such/dir"'), "model:"),
        ('engine = "transformers"\nmodel = "smollm2"\n', "arms: at least one arm is required"),
        (GOOD.replace("[arms.a]", '[arms."a b"]'), "arm name 'a b'"),
        (GOOD + '[launch]\nkeep_caches = ["TRITON_CACHE_DIR"]\n',
         "launch.keep_caches: TRITON_CACHE_DIR must be set in launch.env"),
    ],
)
def test_bad_plans_name_the_field(write, body, expected):
    path = write("p.toml", body)
    with pytest.raises(PlanError) as info:
        load_plan_file(path)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_missing_plan_file(tmp_path: Path):
    with pytest.raises(PlanError, match="plan file not found"):
        load_plan_file(tmp_path / "nope.toml")


def test_corpus_file_errors(write, tmp_path: Path):
    plan = GOOD + '[corpus]\nsource = "file"\npath = "c.jsonl"\n'
    with pytest.raises(CorpusError, match="c.jsonl: corpus file not found"):
        load_plan_file(write("p.toml", plan))
    write("c.jsonl", "\n\n")
    with pytest.raises(CorpusError, match="corpus is empty"):
        load_plan_file(tmp_path / "p.toml")
    write("c.jsonl", '{"tag": "x", "text": "one"}\n{"tag": "y", "text": "two"}\n'
          '{"tag": "x", "text": "three"}\n')
    with pytest.raises(CorpusError, match=r"c.jsonl:3: duplicate tag 'x' \(first on line 1\)"):
        load_plan_file(tmp_path / "p.toml")
    write("c.jsonl", '{"tag": "x", "text": "one"}\n{"tag": "y"}\n')
    with pytest.raises(CorpusError, match="c.jsonl:2: 'text' must be a non-empty string"):
        load_plan_file(tmp_path / "p.toml")
    write("c.jsonl", '{"tag": "x", "text": "one"}\nnot json\n')
    with pytest.raises(CorpusError, match="c.jsonl:2: not valid JSON"):
        load_plan_file(tmp_path / "p.toml")
    write("c.jsonl", '{"tag": "x", "text": "one", "kind": "prose"}\n')
    _, corpus = load_plan_file(tmp_path / "p.toml")
    assert [t.tag for t in corpus.texts] == ["x"]


def test_corpus_tag_selection(write):
    _, corpus = load_plan_file(write("p.toml", GOOD + '[corpus]\ntags = ["json-event"]\n'))
    assert [t.tag for t in corpus.texts] == ["json-event"]
    with pytest.raises(CorpusError, match="corpus.tags: not in the corpus: nope"):
        load_plan_file(write("p.toml", GOOD + '[corpus]\ntags = ["nope"]\n'))


def test_lock_round_trip_keeps_arm_order(write, tmp_path: Path):
    plan, corpus = load_plan_file(write("p.toml", GOOD))
    locked = lock(plan, corpus)
    write_lock(tmp_path / "run", locked)
    again = read_lock(tmp_path / "run")
    assert again.sha256 == locked.sha256
    assert list(again.plan.arms) == ["b", "a"]
    write_lock(tmp_path / "run", locked)  # same plan: accepted


def test_changed_plan_is_refused_with_the_difference(write, tmp_path: Path):
    plan, corpus = load_plan_file(write("p.toml", GOOD))
    write_lock(tmp_path / "run", lock(plan, corpus))
    other, corpus2 = load_plan_file(write("q.toml", GOOD.replace("batch_size = 4",
                                                                 "batch_size = 8")))
    with pytest.raises(PlanMismatchError) as info:
        write_lock(tmp_path / "run", lock(other, corpus2))
    message = str(info.value)
    assert "locked under another plan" in message
    assert '-    "batch_size": 4' in message and '+    "batch_size": 8' in message


def test_tampered_lock_is_detected(write, tmp_path: Path):
    plan, corpus = load_plan_file(write("p.toml", GOOD))
    write_lock(tmp_path / "run", lock(plan, corpus))
    path = tmp_path / "run" / "plan.lock.json"
    path.write_text(path.read_text().replace('"loads_per_arm": 2', '"loads_per_arm": 3'))
    with pytest.raises(BundleError, match="stored sha256 does not match"):
        read_lock(tmp_path / "run")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('engine = "openai"\nmodel = "m"\n[arms.a]\n', "base_url: required"),
        ('engine = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:1"\n[arms.a]\n',
         "loads_per_arm: must be 1"),
        ('engine = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:1"\nloads_per_arm = 1\n'
         '[arms.a]\nargs = ["--x"]\n', "arms.a: args and env need a server"),
        ('engine = "vllm"\nmodel = "smollm2"\nbase_url = "http://127.0.0.1:1"\n[arms.a]\n',
         "base_url: engine 'vllm' is started by servediff"),
        ('engine = "vllm"\nmodel = "smollm2"\n[launch]\ncommand = ["vllm", "{modle}"]\n'
         "[arms.a]\n", "unknown placeholder {modle}"),
        ('engine = "llamacpp"\nmodel = "smollm2"\n[arms.a]\noptions = { concurrency = 0 }\n',
         "arms.a.options.concurrency"),
        # the speed probe's own check (probes/speed.py): the embedded engine does not stream
        ('engine = "transformers"\nmodel = "smollm2"\n[arms.a]\n[probes.speed]\n'
         'mode = "steady"\n', 'probes.speed.mode: "steady" needs streamed tokens, and engine '
         "'transformers' does not stream"),
    ],
)
def test_engine_specific_plan_errors(write, body, expected):
    with pytest.raises(PlanError) as info:
        load_plan_file(write("p.toml", body))
    assert expected in str(info.value)


def test_external_plan_is_valid_with_one_load(write):
    plan, _ = load_plan_file(write("p.toml", 'engine = "openai"\nmodel = "served"\n'
                                   'base_url = "http://127.0.0.1:1"\nloads_per_arm = 1\n'
                                   '[arms.a]\noptions = { score_form = "echo" }\n'))
    assert plan.base_url == "http://127.0.0.1:1"


def test_the_sweep_reaches_the_context_and_the_engines_own_prompt_limit():
    from servediff.probes.sweep import SweepSettings, points

    spec = SweepSettings(start=256, levels=[1, 2])
    assert points(spec, 1024) == [(256, 1), (512, 1), (1023, 1), (1280, 1),
                                  (256, 2), (512, 2), (1023, 2)]
    # SGLang accepts at most 1,017 of 1,024: that point too, below the context's own
    assert points(spec, 1024, limit=1017) == [(256, 1), (512, 1), (1017, 1), (1023, 1),
                                              (1280, 1), (256, 2), (512, 2), (1017, 2),
                                              (1023, 2)]
    assert points(spec, 1024, limit=1023) == points(spec, 1024)


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "docs" /
                                         "examples").glob("*.toml")), ids=lambda p: p.name)
def test_every_example_plan_is_a_valid_plan(path: Path):
    plan, corpus = load_plan_file(path)
    assert plan.arms and len(corpus.texts) > 1


def test_keeping_no_cache_leaves_a_plan_s_sha256_as_it_was(write):
    # launch.keep_caches came after plans were locked: left empty, it is not in the hash
    plan, corpus = load_plan_file(write("p.toml", GOOD))
    kept, _ = load_plan_file(write("q.toml", GOOD + '[launch]\nkeep_caches = ["X"]\n'
                                   'env = { X = "/jit" }\n'))
    assert "keep_caches" not in lock(plan, corpus).canonical()["plan"]["launch"]
    assert lock(kept, corpus).sha256 != lock(plan, corpus).sha256
