"""A plan sized to a time budget (servediff.budget): the plan's own cuts and each probe's,
in one order, only as many as the estimate needs, each leaving every probe with what it
needs; the demo's and a plan file's `budget_s` alike."""

from __future__ import annotations

import copy
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from servediff.budget import cuts, fit
from servediff.corpus import load_corpus
from servediff.estimate import Estimate, Rates, estimate
from servediff.plan import resolve_plan
from servediff.probes import protocol_size
from servediff.probes.concurrency import ConcurrencySettings
from servediff.probes.repeat import RepeatSettings
from servediff.probes.speed import SpeedSettings
from servediff.probes.sweep import SweepSettings

DEMO = tomllib.loads(resources.files("servediff.plans").joinpath("demo.toml").read_text())
# a slow machine: float32 on a CPU of half the reference's speed
SLOW = (Rates("CPU", prefill_tok_s=370.0, decode_tok_s=13.0, parameters=134_515_008,
              source="a slow CPU"), 12.0)
LONG = ["log-server-long", "csv-benchmark-long", "json-records-long", "code-python-long",
        "prose-essay-long"]
# the demo's cuts as the plan's and its probes' settings make them, in order
DEMO_CUTS = [
    "combined loads: each cold load runs its drift, then its cost probes (4 engine starts, "
    "not 8)",
    "speed: 16 generated tokens a request, not 32",
    "concurrency: prompts of 128 and 256 tokens, not 128 and 512",
    "corpus: 25 of its 45 texts, every other short one and the 5 long ones (where drift "
    "shows most)",
    "speed: 256-token prompts, not 512",
    "prefix: a 256-token shared prefix, not 512",
    "sweep: from 1,024 tokens to the context, not from 512",
    "generate: 2 texts, not 4",
    "corpus: 13 texts, every fourth short one and 3 of the 5 long ones",
    "sweep: the context and one past it only",
    "concurrency: prompts of 128 tokens only, not 128 and 256",
    "speed: 8 generated tokens a request, not 16",
]


def seconds(raw: dict[str, Any], tmp_path: Path) -> float:
    plan, corpus = resolve_plan(raw, "demo.toml", tmp_path)
    found = estimate(plan, protocol_size(plan, corpus), tmp_path, SLOW)
    assert isinstance(found, Estimate)
    return found.seconds


def demo_cuts(tmp_path: Path) -> list[Any]:
    plan, _ = resolve_plan(DEMO, "demo.toml", tmp_path)
    return cuts(plan, load_corpus(None))


def test_the_demo_cuts_come_from_its_own_settings_in_the_order_of_least_loss(tmp_path: Path):
    assert [cut.says for cut, _ in demo_cuts(tmp_path)] == DEMO_CUTS


def test_the_demo_is_cut_only_as_far_as_its_budget_needs(tmp_path: Path):
    made = demo_cuts(tmp_path)
    whole = seconds(DEMO, tmp_path)
    # a budget it fits: nothing cut
    same, says, expected = fit(DEMO, made, whole + 1, lambda r: seconds(r, tmp_path))
    assert says == [] and same == DEMO and expected == whole
    # a tighter budget: the first cuts, in order, and an estimate within it
    _, says, expected = fit(DEMO, made, whole * 0.7, lambda r: seconds(r, tmp_path))
    assert 0 < len(says) < len(made) and says == DEMO_CUTS[:len(says)]
    assert expected <= whole * 0.7 < seconds(DEMO, tmp_path)
    assert "loads" not in DEMO  # the packaged plan itself is not changed


@pytest.mark.parametrize("cut", range(len(DEMO_CUTS) + 1))
def test_every_cut_keeps_every_probe_with_what_it_needs(tmp_path: Path, cut: int):
    from servediff.budget import apply

    raw = copy.deepcopy(DEMO)
    for c, table in demo_cuts(tmp_path)[:cut]:
        apply(raw, c, table)
    plan, corpus = resolve_plan(raw, "demo.toml", tmp_path)
    # every probe kind still runs
    assert all(s.on() for s in plan.probes.sections())
    assert plan.probes.get(RepeatSettings).count >= 1
    # drift across loads and a noise band: two loads and two cost loads of 3 replicates
    assert plan.loads_per_arm == 2 and plan.cost_loads_per_arm == 2
    speed = plan.probes.get(SpeedSettings)
    assert speed.replicates == 3 and speed.levels == [1, 2] and speed.max_tokens >= 8
    assert plan.probes.get(SweepSettings).levels == [1, 2]
    assert plan.probes.get(ConcurrencySettings).levels == [1, 2, 4]
    # short texts and long ones
    tags = {t.tag for t in corpus.texts}
    assert len(set(LONG) & tags) >= 3 and len(tags - set(LONG)) >= 10


def test_a_plan_of_its_own_is_cut_from_its_own_settings(tmp_path: Path):
    """Another plan's cuts follow its values, not the demo's: the defaults of every probe,
    a context of 8,192 and a corpus file of no long texts."""
    texts = "".join(f'{{"tag": "t{i}", "text": "text number {i} {"word " * i}"}}\n'
                    for i in range(24))
    (tmp_path / "texts.jsonl").write_text(texts)
    raw = {"engine": "transformers", "model": "smollm2", "loads": "combined",
           "engine_options": {"max_model_len": 8192},
           "arms": {"a": {}, "b": {"options": {"attn_implementation": "eager"}}},
           "corpus": {"source": "file", "path": "texts.jsonl"}}
    plan, _ = resolve_plan(raw, "p.toml", tmp_path)
    made = cuts(plan, load_corpus(tmp_path / "texts.jsonl"))
    assert [(c.rank, c.says) for c, _ in made] == [
        (20, "speed: 32 generated tokens a request, not 64"),
        # concurrency: 1,536 halved is no longer than 768, so no rank 30
        (40, "corpus: 12 of its 24 texts, every other one"),
        (50, "speed: prompts of 256 and 1,024 tokens, not 512 and 2,048"),
        (51, "prefix: a 2,048-token shared prefix, not 4,096"),
        (60, "sweep: from 1,024 tokens to the context, not from 512"),
        (70, "generate: 4 texts, not 8"),
        (80, "corpus: 6 texts, every fourth one"),
        (90, "sweep: from 2,048 tokens to the context, not from 1,024"),
        (100, "concurrency: prompts of 256 and 768 tokens only, not 256, 768 and 1,536"),
        (110, "speed: 16 generated tokens a request, not 32")]


def test_the_demo_cuts_itself_from_the_rates_it_measures_and_resumes_as_locked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from servediff import calibrate
    from servediff.bundle import write_lock
    from servediff.cli import run as cli_run
    from servediff.plan import lock

    asked: list[str] = []

    def measured(plan: Any, corpus: Any, say: Any) -> tuple[Rates, float]:
        asked.append(plan.name)
        return SLOW

    monkeypatch.setattr(calibrate, "embedded_rates", measured)
    whole, _, none = cli_run.sized_demo(0, tmp_path)
    assert none is None and asked == [] and whole.loads == "separate"
    plan, corpus, rates = cli_run.sized_demo(300, tmp_path)
    assert asked == ["demo"] and rates == SLOW
    assert plan.loads == "combined" and plan != whole  # cut, at a slow machine's rates
    # a demo resumed keeps the plan its run directory was locked with: no new measurement
    root = tmp_path / "run"
    root.mkdir()
    write_lock(root, lock(plan, corpus))
    ran: list[Any] = []

    class Stop(Exception):
        pass

    def runner(plan: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(plan)
        raise Stop

    monkeypatch.setattr(cli_run, "Runner", runner)
    with pytest.raises(Stop):
        cli_run.execute(None, root, budget_s=300)
    assert asked == ["demo"] and ran == [plan]


def test_the_rates_are_measured_on_the_real_embedded_engine(tmp_path: Path):
    """servediff.calibrate on SmolLM2 itself, float32 on this CPU: rates a CPU can give
    (a 2-core one gives hundreds of prompt tokens and tens of generated tokens a second)."""
    from servediff.calibrate import embedded_rates

    raw = copy.deepcopy(DEMO)
    raw["engine_options"]["dtype"] = "float32"
    plan, corpus = resolve_plan(raw, "demo.toml", tmp_path)
    rates, start = embedded_rates(plan, corpus, lambda message: None)
    assert rates.source == "this machine, measured just now in float32"
    assert 10 < rates.prefill_tok_s < 1_000_000 and 0.5 < rates.decode_tok_s < 10_000
    assert rates.prefill_tok_s > rates.decode_tok_s and 0 < start < 600


def test_the_time_the_measurement_takes_comes_out_of_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The budget is the demo's whole time: a measurement that takes 100 s of 600 leaves
    the run 500, so the demo is cut further than with the measurement free."""
    from servediff import budget, calibrate

    clock = iter([0.0, 100.0])
    monkeypatch.setattr(budget.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(calibrate, "embedded_rates", lambda *args: SLOW)
    sized = budget.size(copy.deepcopy(DEMO), "demo.toml", 600, tmp_path, lambda message: None)
    assert sized.measuring_s == 100.0
    made = demo_cuts(tmp_path)
    _, free, _ = fit(DEMO, made, 600, lambda raw: seconds(raw, tmp_path))
    _, paid, expected = fit(DEMO, made, 500, lambda raw: seconds(raw, tmp_path))
    assert sized.cuts == paid and len(paid) > len(free)
    assert sized.expected == pytest.approx(expected)


def test_a_plan_file_with_a_budget_is_cut_locked_and_resumed_as_locked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`budget_s` in a plan file: `servediff run` cuts it before a new run, from rates
    measured here (the embedded engine and the built-in model), and records what it cut in
    the lock; the same file resumes under the locked plan, a changed one is refused."""
    from servediff import calibrate
    from servediff.bundle import read_lock, write_lock
    from servediff.cli import run as cli_run
    from servediff.errors import PlanMismatchError
    from servediff.plan import lock

    asked: list[str] = []
    monkeypatch.setattr(calibrate, "embedded_rates",
                        lambda plan, corpus, say: asked.append(plan.name) or SLOW)
    text = (resources.files("servediff.plans").joinpath("demo.toml").read_text()
            .replace('name = "demo"', 'name = "mine"\nbudget_s = 300'))
    path = tmp_path / "mine.toml"
    path.write_text(text)
    root = tmp_path / "run"
    plan, corpus, rates, where = cli_run.sized_plan(path, root)
    assert where == root and rates == SLOW and asked == ["mine"]
    assert plan.budget_s == 300 and plan.sized is not None
    assert plan.sized.cuts == DEMO_CUTS[:len(plan.sized.cuts)] and plan.sized.cuts
    assert plan.sized.rates == "a slow CPU" and plan.loads == "combined"
    root.mkdir()
    write_lock(root, lock(plan, corpus))
    # resumed: the locked plan, no new measurement
    again, _, none, _ = cli_run.sized_plan(path, root)
    assert again == read_lock(root).plan and none is None and asked == ["mine"]
    # another plan file in the same directory: the lock refuses it, naming the change
    path.write_text(text.replace("budget_s = 300", "budget_s = 200"))
    other, other_corpus, _, _ = cli_run.sized_plan(path, root)
    with pytest.raises(PlanMismatchError, match="budget_s"):
        write_lock(root, lock(other, other_corpus))
    # without a budget, the plan as written, and a lock written before budgets keeps its
    # sha256 (budget_s and sized are left out at their defaults)
    path.write_text(text.replace("budget_s = 300\n", ""))
    whole, whole_corpus, measured, _ = cli_run.sized_plan(path, tmp_path / "new")
    assert whole.sized is None and measured is None and whole.loads == "separate"
    assert "budget_s" not in lock(whole, whole_corpus).canonical()["plan"]


def test_a_budget_for_an_engine_it_cannot_measure_here_uses_the_reference_rates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from servediff import budget, calibrate

    monkeypatch.setattr(calibrate, "embedded_rates", lambda *args: pytest.fail("measured"))
    raw = {"engine": "llamacpp", "model": "model.gguf", "budget_s": 60,
           "arms": {"a": {}, "b": {"args": ["-fa", "on"]}}}
    (tmp_path / "model.gguf").write_bytes(b"\0" * 300_000_000)
    sized = budget.size(raw, "p.toml", 60, tmp_path, lambda message: None)
    assert sized.measured is None and sized.measuring_s < 60
    assert sized.cuts and sized.cuts[0].startswith("speed:")
