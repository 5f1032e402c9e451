"""No secret enters the evidence: env references kept, literal secrets refused, logs
stored without the values."""

from __future__ import annotations

from pathlib import Path

import pytest

from servediff.errors import PlanError
from servediff.plan import resolve_plan
from tests.engines.fake import FakeLauncher, FakeProcess
from tests.unit.test_runner import plan, run

TOKEN = "hf_" + "Zq7Rk2Lm9Xv4Tb8Wn1Pc6Yd3Hs5Gf0Ja"


def plan_dict(env: dict[str, str], args: list[str] | None = None) -> dict[str, object]:
    return {"engine": "vllm", "model": "smollm2",
            "arms": {"a": {"env": env, "args": args or []}}}


def test_a_literal_secret_in_a_plan_is_refused_with_how_to_pass_it(tmp_path: Path):
    with pytest.raises(PlanError) as found:
        resolve_plan(plan_dict({"HF_TOKEN": TOKEN}, ["--api-key", "sk-proj-" + "a1" * 10]),
                     "p.toml", tmp_path)
    said = str(found.value)
    assert "p.toml: arms.a.env.HF_TOKEN: the value looks like a secret (token)" in said
    assert 'HF_TOKEN = "${HF_TOKEN}"' in said
    assert "p.toml: arms.a.args[1]: looks like a secret (token)" in said
    assert TOKEN not in said  # the refusal does not print it either


def test_a_reference_to_a_variable_that_is_not_set_is_named(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SERVEDIFF_TEST_TOKEN", raising=False)
    with pytest.raises(PlanError, match=r"arms.a.env: refers to \$\{SERVEDIFF_TEST_TOKEN\}, "
                                        "which is not set"):
        resolve_plan(plan_dict({"HF_TOKEN": "${SERVEDIFF_TEST_TOKEN}"}), "p.toml", tmp_path)
    monkeypatch.setenv("SERVEDIFF_TEST_TOKEN", TOKEN)
    resolve_plan(plan_dict({"HF_TOKEN": "${SERVEDIFF_TEST_TOKEN}"}), "p.toml", tmp_path)


class Leaky(FakeLauncher):
    """An engine that prints its environment's token to its log, as engines do."""

    given: dict[str, str] | None = None

    def __call__(self, argv: list[str], env: dict[str, str], log_path: Path, host: str,
                 port: int) -> FakeProcess:
        proc = super().__call__(argv, env, log_path, host, port)
        Leaky.given = dict(env)
        with log_path.open("a") as log:
            log.write(f"loading with token {env.get('HF_TOKEN')}\n")
        return proc


def test_the_engine_gets_the_value_and_the_bundle_keeps_only_the_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SERVEDIFF_TEST_TOKEN", TOKEN)
    the_plan = plan(tmp_path, arms={"a": {"env": {"HF_TOKEN": "${SERVEDIFF_TEST_TOKEN}"}}},
                    loads_per_arm=1)
    root = run(tmp_path, Leaky(), the_plan)
    assert Leaky.given is not None and Leaky.given["HF_TOKEN"] == TOKEN
    files = [p for p in root.rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" for p in files)
    for path in files:
        assert TOKEN not in path.read_text(errors="replace"), path
    log = (root / "logs" / "a-load1.log").read_text()
    assert "loading with token ${SERVEDIFF_TEST_TOKEN}" in log
    assert '"HF_TOKEN": "${SERVEDIFF_TEST_TOKEN}"' in (root / "plan.lock.json").read_text()
