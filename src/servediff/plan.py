"""The plan: the pre-registered experiment, validated strictly and locked.

A plan is TOML. Unknown keys are errors, every error names the file and the
field. `lock` gives the canonical plan, resolved corpus and their sha256, which
`bundle.write_lock` writes as `plan.lock.json` before the first measurement; a
run directory that holds a lock for a different plan is refused with the
difference shown.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from servediff import models, secret_env
from servediff.corpus import Corpus, load_corpus
from servediff.design import Design, DesignSpec
from servediff.design import make as make_design
from servediff.engines import registry
from servediff.engines.base import EngineAdapter, EngineOptions
from servediff.errors import PlanError
from servediff.evidence import CachePolicy
from servediff.hub import hub_id
from servediff.models import BUILTIN_MODELS
from servediff.probes import settings as probe_settings
from servediff.probes.settings import ProbeSettings
from servediff.validation import describe, suggest

LOCK_SCHEMA_VERSION = 1
ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]{0,39}$")
# An arm the factors make is named by them: "autotune_off+deterministic".
FACTOR_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+]{0,99}$")
FACTOR_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]{0,31}$")
BASELINE = "baseline"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_command(command: list[str] | None) -> list[str] | None:
    """A launch command template: not empty, and only the placeholders servediff fills."""
    if command is not None:
        if not command:
            raise ValueError("must not be empty")
        for part in command:
            for name in re.findall(r"\{([^}]*)\}", part):
                if name not in ("model", "host", "port"):
                    raise ValueError(
                        f"unknown placeholder {{{name}}}; known: {{model}}, {{host}}, {{port}}")
    return command


class Change(Strict):
    """What an arm or a factor changes relative to the plan's `[engine_options]` and
    `[launch]`."""

    args: list[str] = Field(default_factory=list, examples=[["--enforce-eager"]],
                            description="extra launch arguments, after the command's")
    env: dict[str, str] = Field(default_factory=dict, examples=[{"VLLM_USE_V1": "1"}],
                                description="extra environment variables, merged over "
                                "launch.env")
    options: dict[str, Any] = Field(
        default_factory=dict, examples=[{"attn_implementation": "eager"}],
        description="engine options merged over [engine_options]")
    cache_policy: CachePolicy | None = Field(
        default=None, examples=["shared"],
        description="this arm's own JIT/autotune cache policy (default: "
        "launch.cache_policy); two arms that differ only here compare warm and fresh caches")
    command: list[str] | None = Field(
        default=None,
        examples=[["/opt/engine-2.0/serve", "--model", "{model}", "--port", "{port}"]],
        description="another build of the engine: this arm's own launch command template "
        "(default: launch.command), with the same placeholders")

    @field_validator("command")
    @classmethod
    def _command(cls, command: list[str] | None) -> list[str] | None:
        return check_command(command)


class SizedSpec(Strict):
    """What a time budget did to the plan (`budget_s`): set by servediff when it cut it."""

    # the plan as written, before the cuts: a resumed run checks the plan file against it
    written_sha256: str
    cuts: list[str]
    estimate_s: float
    # where the estimate's rates came from
    rates: str


class ArmSpec(Change):
    factors: list[str] = Field(
        default_factory=list, json_schema_extra={"set_by_servediff": True},
        description="the factors this arm is made of, in the plan's order; servediff sets "
        "it when it expands [factors] (an arm written by hand has none)")


class FactorSpec(Change):
    """One change relative to the baseline ([factors.NAME]); servediff makes the arms."""

    @model_validator(mode="after")
    def _changes_something(self) -> FactorSpec:
        if not self.model_dump(exclude_defaults=True):
            raise ValueError("a factor must change something: args, env, options, "
                             "cache_policy or command")
        return self


def combine(names: list[str], factors: dict[str, FactorSpec]) -> ArmSpec:
    """The arm made of these factors: args in factor order, the rest merged; two factors
    that set one thing differently cannot be combined."""
    args: list[str] = []
    merged: dict[str, dict[str, Any]] = {"env": {}, "options": {}}
    single: dict[str, tuple[str, Any]] = {}
    for name in names:
        f = factors[name]
        args += f.args
        for part in ("env", "options"):
            for key, value in getattr(f, part).items():
                if key in merged[part] and merged[part][key] != value:
                    raise ValueError(f"factors {_setter(names, factors, part, key)} and "
                                     f"{name} set {part}.{key} differently")
                merged[part][key] = value
        for part in ("cache_policy", "command"):
            value = getattr(f, part)
            if value is not None:
                if part in single and single[part][1] != value:
                    raise ValueError(f"factors {single[part][0]} and {name} set {part} "
                                     "differently")
                single[part] = (name, value)
    return ArmSpec(args=args, env=merged["env"], options=merged["options"],
                   cache_policy=single.get("cache_policy", (None, None))[1],
                   command=single.get("command", (None, None))[1], factors=list(names))


def _setter(names: list[str], factors: dict[str, FactorSpec], part: str, key: str) -> str:
    return next(n for n in names if key in getattr(factors[n], part))


def arm_name(factors: list[str]) -> str:
    return "+".join(factors) or BASELINE


class CorpusSpec(Strict):
    """The texts every drift probe scores."""

    source: Literal["builtin", "file"] = Field(
        default="builtin", description='"builtin" (45 texts, 38 to 1,193 tokens) or "file"')
    path: str | None = Field(default=None, examples=["texts.jsonl"],
                             description='source = "file": JSON lines of {"tag", "text", '
                             '"kind"?}, relative to the plan')
    max_texts: Annotated[int, Field(ge=0)] = Field(default=0, description="at most this many "
                                                   "texts; 0 = all")
    tags: list[str] = Field(default_factory=list, description="only the texts of these "
                            "tags (default: every text)")


S = TypeVar("S", bound=ProbeSettings)


class ProbesSpec(BaseModel):
    """Every registered probe's settings, by its section: `[probes.speed]` is
    `probes.get(SpeedSettings)`. The probes are the registry's (probes/settings.py); a
    table for a probe it does not know is an error."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, data: Any) -> Any:
        if isinstance(data, ProbesSpec):
            return data
        if not isinstance(data, dict):
            raise ValueError("must be a table of probe settings")
        # the errors of a section name it: probes.speed.levels
        return dict(cls.fields_model().model_validate(data))

    @staticmethod
    def fields_model() -> type[BaseModel]:
        """The registered probes' settings as one model (what validation.keys_at reads)."""
        return probe_settings.sections_model()

    def get(self, kind: type[S]) -> S:
        """The settings of the probe whose settings model is `kind`: its defaults in a plan
        validated before that probe was registered."""
        value = (self.model_extra or {}).get(kind.section)
        return value if isinstance(value, kind) else kind()

    def sections(self) -> list[ProbeSettings]:
        """Every probe's settings, in the registry's order."""
        return [v for v in (self.model_extra or {}).values() if isinstance(v, ProbeSettings)]

    def cost_probes(self) -> list[str]:
        """The sections of the enabled probes of cost loads."""
        return [x.section for x in probe_settings.sections()
                if x.phase == "cost" and self.get(x).on()]


class ScoringSpec(Strict):
    """How a text is teacher-forced."""

    prefix: Literal["bos", "none"] | Annotated[int, Field(ge=0)] = Field(
        default="bos", description='the token before every text: "bos" (the tokenizer\'s BOS, as '
        'lm-evaluation-harness: every text token is scored), "none" (tokens 2..N are '
        "scored) or an id; it changes every logprob, not only the first")
    request_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=300.0, description="past it, the engine is watched as in the sweep "
        "(launch.stall_window_s)")
    give_up_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None, examples=[3000], description="a busy engine is waited on this long "
        "(default: 10 x request_timeout_s)")


class ThresholdSpec(Strict):
    """When a difference counts."""

    moved_abs_nll: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="a text moved between two scorings when |dNLL| > this; 0 = any "
        "difference at all")


class QuietSpec(Strict):
    """The quiet-box gate before a load (quiet.py): limits, how long to wait, what then."""

    gate_cost: bool = Field(default=True, description="wait for a quiet machine before every "
                            "cost load")
    gate_drift: bool = Field(default=False, description="and before every drift load")
    max_foreign_cpu: Annotated[float, Field(ge=0)] = Field(
        default=0.5, description="CPU cores other processes may use")
    max_load_per_core: Annotated[float, Field(ge=0)] = Field(
        default=1.5, description="1-minute load average per core")
    max_gpu_memory_mb: Annotated[int, Field(ge=0)] = Field(
        default=1024, description="GPU memory in use above what was in use before the run's first "
        "load")
    window_s: Annotated[float, Field(gt=0, le=60)] = Field(
        default=3.0, description="how long each look at the machine lasts")
    wait_s: Annotated[float, Field(ge=0)] = Field(
        default=300.0, description="how long to wait for a quiet machine, then `action`")
    action: Literal["refuse", "mark"] = Field(
        default="refuse", description='"refuse": stop with a one-line reason (exit 3, cells kept); '
        '"mark": go on, and its speed claims say "measured on a busy machine"')


class ScrubSpec(Strict):
    """Hosts the scrubber keeps verbatim (beyond its public allowlist) or always replaces."""

    allow_hosts: list[str] = Field(default_factory=list, description="kept verbatim, with "
                                   "their subdomains")
    deny_hosts: list[str] = Field(default_factory=list, description="always replaced")


class LaunchSettings(Strict):
    """The plan's `[launch]` table: how every arm's engine is started and stopped."""

    command: list[str] | None = Field(
        default=None,
        examples=[["vllm", "serve", "{model}", "--host", "{host}", "--port", "{port}"]],
        description="the launch template: {model}, {host} and {port} filled in per load, "
        "the arm's args appended (default: the engine's own, `servediff engines`)")
    env: dict[str, str] = Field(default_factory=dict, description="environment for every "
                                "arm (an arm's env is merged over it)")
    start_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=600.0, description="an engine not ready by then failed to start")
    stop_grace_s: Annotated[float, Field(gt=0)] = Field(
        default=15.0, description="SIGTERM, then this long before SIGKILL")
    cache_policy: CachePolicy = Field(
        default="fresh", description='JIT/autotune caches per load: "fresh" (new, empty: a cold '
        'start on a new host), "shared" (one set per arm, kept across its loads: a warm '
        'restart) or "as-is" (the environment\'s own)')
    keep_caches: list[str] = Field(
        default_factory=list, examples=[["FLASHINFER_WORKSPACE_BASE"]],
        description="cache variables left where this table's env puts them on every load: "
        "compiled code that is no per-load choice (FlashInfer's JIT builds); each load "
        'records it as "plan-env"')
    stall_window_s: Annotated[float, Field(gt=0)] = Field(
        default=10.0,
        description="a request past its timeout is hung when the engine did no CPU or "
        "GPU work this long; while it works it is only slow")
    max_attempts: Annotated[int, Field(ge=1, le=10)] = Field(
        default=2, description="launches per load: a crashed arm is started again for the cells "
        "still missing (a load given up: the run reports, then exits 5; run it again)")

    @field_validator("command")
    @classmethod
    def _command(cls, command: list[str] | None) -> list[str] | None:
        return check_command(command)

    @model_validator(mode="after")
    def _kept_caches_are_given(self) -> LaunchSettings:
        missing = [name for name in self.keep_caches if name not in self.env]
        if missing:
            raise ValueError(f"keep_caches: {', '.join(missing)} must be set in launch.env "
                             "(the directory every load keeps)")
        return self


class ScaleSpec(Strict):
    """Where the loads run: here one at a time, or on a Ray cluster (`run --ray`)."""

    ray: str | None = Field(
        default=None, examples=["auto"], description='a Ray cluster: "auto" (the one this machine '
        'belongs to, RAY_ADDRESS, else a new local one) or an address ("ray://host:10001", '
        '"host:6379"); default: here, one load at a time')
    cpus_per_load: Annotated[float, Field(gt=0)] = Field(
        default=1.0, description="CPU slots one load reserves on its node")
    gpus_per_load: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="GPUs one load reserves on its node (vLLM with TP=2: 2)")


Regime = Literal["across loads", "within a load", "concurrency"]
REGIMES: tuple[Regime, ...] = ("across loads", "within a load", "concurrency")


class ShipSpec(Strict):
    """What "reproducible" means for the answer "what to ship": no text moved (by more
    than thresholds.moved_abs_nll) in each of these regimes."""

    require: list[Regime] = Field(
        default_factory=lambda: list(REGIMES),
        description="the regimes in which no text may move for an arm to be shippable")

    @field_validator("require")
    @classmethod
    def _require(cls, require: list[Regime]) -> list[Regime]:
        if not require:
            raise ValueError(f"name one regime at least: {', '.join(REGIMES)}")
        return [r for r in REGIMES if r in require]


class Plan(Strict):
    """A plan file, validated: the engine, the model, the arms, the probes, how to run them."""

    name: str = Field(default="unnamed", examples=["attention"], description="the run's name in "
                      "its report")
    engine: str = Field(examples=["transformers"], description="transformers | vllm | "
                        "llamacpp | sglang | openai (an external endpoint)")
    model: str = Field(examples=["smollm2"], description="built-in (smollm2), a path to a "
                       'HF model folder or a GGUF file, or a hub id "org/name[@revision]" '
                       "(vllm, sglang, openai)")
    base_url: str | None = Field(default=None, examples=["http://127.0.0.1:8000"],
                                 description='engine = "openai": the endpoint, which '
                                 "servediff does not start")
    loads_per_arm: Annotated[int, Field(ge=1, le=50)] = Field(
        default=2, description="cold starts per arm for the drift probes")
    cost_loads_per_arm: Annotated[int, Field(ge=1, le=50)] = Field(
        default=2, description="cold starts per arm for the cost probes (speed, prefix, sweep, "
        "capacity), the engine as the arm configures it; arms alternate A B B A")
    adaptive: bool = Field(
        default=False,
        description="a speed comparison still within noise after the cost loads gets "
        "one more cost load on each of its arms, up to max_cost_loads; a clear one gets none")
    max_cost_loads: Annotated[int, Field(ge=1, le=50)] = Field(
        default=4, description="adaptive: at most this many cost loads per arm")
    cost_loads: dict[str, int] | None = Field(
        default=None, json_schema_extra={"set_by_servediff": True},
        description="each arm's cost loads once some were added: set by servediff from the "
        "run's cost_loads.json, not in a plan file")
    loads: Literal["separate", "combined"] = Field(
        default="separate",
        description='"combined": each cold load runs its drift probes, then its '
        "cost probes (gated as a cost load is): max(loads_per_arm, cost loads) starts per "
        "arm, not their sum")
    engine_options: dict[str, Any] = Field(
        default_factory=dict, examples=[{"device": "auto", "dtype": "float32"}],
        description="engine options for every arm, each engine its own (`servediff engines` "
        'lists them); transformers: device ("auto": CUDA when present), dtype (float32, '
        "bfloat16, float16, or auto: bf16 where native) and more, below")
    factors: dict[str, FactorSpec] = Field(
        default_factory=dict, description="one change each relative to the baseline; "
        "servediff makes the arms from them (`design`), before any arm of [arms]")
    design: DesignSpec = Field(default_factory=DesignSpec,
                               description="which factor sets become arms")
    confirmation: list[str] | None = Field(
        default=None, json_schema_extra={"set_by_servediff": True},
        description="the factors of the confirmation arm: set by servediff after a design "
        "short of the full factorial (confirmation.json), not in a plan file")
    arms: dict[str, ArmSpec] = Field(default_factory=dict,
                                     description="the configurations compared, by name")
    ship: ShipSpec = Field(default_factory=ShipSpec,
                           description='what "reproducible" means for What to ship')
    corpus: CorpusSpec = Field(default_factory=CorpusSpec, description="the texts scored")
    probes: ProbesSpec = Field(default_factory=lambda: ProbesSpec(),
                               description="every probe's settings, by its section")
    scoring: ScoringSpec = Field(default_factory=ScoringSpec,
                                 description="how a text is teacher-forced")
    thresholds: ThresholdSpec = Field(default_factory=ThresholdSpec,
                                      description="when a difference counts")
    launch: LaunchSettings = Field(default_factory=LaunchSettings,
                                   description="how every arm's engine starts and stops")
    scrub: ScrubSpec = Field(default_factory=ScrubSpec,
                             description="hosts for the scrubber (docs/reports.md)")
    quiet: QuietSpec = Field(default_factory=QuietSpec, description="the gate before every "
                             "cost load (docs/costs.md)")
    cross_machine: bool = Field(
        default=False, description="true: a run may resume on another machine or GPU model (both "
        "are then named beside the numbers); default: only on the one it started on")
    comparisons: list[list[str]] | None = Field(
        default=None, examples=[[["a", "b"], ["c", "d"]]],
        description="groups of arms compared with each other, each against its first arm "
        "(default: one group of every arm); on a cluster each group may run on a node of "
        "its own")
    budget_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None, examples=[600],
        description="the seconds the whole run should take here: before a new run, its "
        "grids are cut, cheapest loss first (combined loads, fewer texts and generated "
        "tokens, shorter prompts, a shorter sweep), until its estimate fits; every probe "
        "still answers, and the cuts are said and locked; none: the plan as written")
    sized: SizedSpec | None = Field(
        default=None, json_schema_extra={"set_by_servediff": True},
        description="what the budget cut: set by servediff when it sizes the plan")
    scale: ScaleSpec = Field(default_factory=ScaleSpec, description="where loads run; not "
                             "part of the locked plan (a run may resume elsewhere)")

    @field_validator("factors")
    @classmethod
    def _factor_names(cls, factors: dict[str, FactorSpec]) -> dict[str, FactorSpec]:
        for name in factors:
            if not FACTOR_NAME.match(name) or name == BASELINE:
                raise ValueError(
                    f"factor name {name!r} must be 1-32 letters, digits, '_' or '.', "
                    f"starting with a letter or digit, and not {BASELINE!r}")
        return factors

    @field_validator("arms")
    @classmethod
    def _arm_names(cls, arms: dict[str, ArmSpec]) -> dict[str, ArmSpec]:
        for name, arm in arms.items():
            pattern = FACTOR_ARM_NAME if arm.factors else ARM_NAME
            if not pattern.match(name):
                raise ValueError(
                    f"arm name {name!r} must be 1-40 letters, digits, '_' or '.', "
                    "starting with a letter or digit"
                )
        return arms

    @model_validator(mode="after")
    def _expand(self) -> Plan:
        """The arms the factors make come first; a plan read back from its lock holds them
        already, and they must be what the factors make."""
        made = {arm_name(names): combine(names, self.factors)
                for names in self.made_design().rows} if self.factors else {}
        if self.confirmation is not None:
            unknown = [f for f in self.confirmation if f not in self.factors]
            if unknown:
                raise ValueError(f"confirmation: no such factor {', '.join(unknown)}")
            made.setdefault(arm_name(self.confirmation),
                            combine(self.confirmation, self.factors))
        for name, arm in self.arms.items():
            if name in made and arm != made[name]:
                raise ValueError(f"arms.{name}: the factors make an arm of this name; "
                                 "name it otherwise")
            if arm.factors and name not in made:
                raise ValueError(f"arms.{name}: factors {arm.factors} are not an arm the "
                                 "plan's [factors] make; leave `factors` to servediff")
        arms = {**made, **{n: a for n, a in self.arms.items() if n not in made}}
        if not arms:
            raise ValueError("arms: at least one arm is required ([arms.NAME], or "
                             "[factors.NAME] for servediff to make them)")
        object.__setattr__(self, "arms", arms)  # frozen: set once, while validating
        return self

    @model_validator(mode="after")
    def _comparisons(self) -> Plan:
        groups = self.comparisons
        if groups is None:
            return self
        seen: list[str] = [a for group in groups for a in group]
        unknown = sorted(set(seen) - set(self.arms))
        if unknown:
            raise ValueError(f"comparisons: no such arm {', '.join(map(repr, unknown))}; "
                             f"the arms are {', '.join(self.arms)}")
        twice = sorted({a for a in seen if seen.count(a) > 1})
        left = [a for a in self.arms if a not in seen]
        if twice or left or not all(groups):
            raise ValueError(
                "comparisons: every arm in exactly one non-empty group"
                + (f"; in more than one: {', '.join(twice)}" if twice else "")
                + (f"; in none: {', '.join(left)}" if left else ""))
        return self

    def made_design(self) -> Design:
        """The design the factors make (the baseline alone without factors)."""
        try:
            return make_design(list(self.factors), self.design)
        except ValueError as e:
            raise ValueError(f"design.{e}") from None

    @model_validator(mode="after")
    def _adaptive(self) -> Plan:
        if self.adaptive and self.max_cost_loads <= self.cost_loads_per_arm:
            raise ValueError(f"max_cost_loads: must be above cost_loads_per_arm "
                             f"({self.cost_loads_per_arm}) for adaptive cost loads to add "
                             f"any; it is {self.max_cost_loads}")
        unknown = sorted(set(self.cost_loads or {}) - set(self.arms))
        if unknown:
            raise ValueError(f"cost_loads: no such arm {', '.join(unknown)}")
        return self

    def cost_loads_of(self, arm: str) -> int:
        """The cost loads this arm takes: the plan's, or more where some were added."""
        return max(self.cost_loads_per_arm, (self.cost_loads or {}).get(arm, 0))

    def combined(self, arm: str, load: int) -> bool:
        """Whether this drift load of the arm also runs its cost load of the same number
        (the cost loads past the drift loads, or added by the adaptive rule, run alone; an
        external endpoint has no cost loads)."""
        return (self.loads == "combined" and self.base_url is None
                and load <= self.loads_per_arm
                and load <= self.cost_loads_of(arm))

    @model_validator(mode="after")
    def _combined(self) -> Plan:
        if self.loads == "combined" and self.scale.ray is not None:
            raise ValueError(
                'loads: "combined" runs cost probes inside drift loads, and a Ray run '
                "places drift loads side by side on a node, where their timings would be "
                'each other\'s; use loads = "separate" with scale.ray')
        return self

    def confirmed(self, factors: list[str]) -> Plan:
        """This plan with the confirmation arm of these factors (in the baseline's
        comparison)."""
        data = self.model_dump()
        data["confirmation"] = [f for f in self.factors if f in factors]
        name = arm_name(data["confirmation"])
        if self.comparisons and name not in self.arms:
            data["comparisons"] = [[*g, name] if BASELINE in g else g
                                   for g in self.comparisons]
        return Plan.model_validate(data)

    def factor_arms(self) -> dict[str, list[str]]:
        """The arms the factors made, with their factors (the baseline's: none)."""
        return {name: arm.factors for name, arm in self.arms.items()
                if arm.factors or (self.factors and name == BASELINE)}

    def groups(self) -> list[list[str]]:
        """The comparisons, each with its baseline first (default: every arm, one group)."""
        return [list(g) for g in self.comparisons] if self.comparisons else [list(self.arms)]

    @model_validator(mode="after")
    def _probe_settings(self) -> Plan:
        for settings in self.probes.sections():
            settings.check(self)
        return self


class LockedPlan(BaseModel):
    """What `plan.lock.json` holds: the plan, the texts it scores, and their hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: Plan
    corpus: Corpus
    sha256: str

    def canonical(self) -> dict[str, Any]:
        return _canonical(self.plan, self.corpus)

    def same_run(self, other: LockedPlan) -> bool:
        """Whether `other` is this locked run's plan. The plans are compared as today's
        servediff reads them, not by hash: a setting added since this lock was written,
        left at its default, is the behaviour the run had, so an interrupted run resumes
        under an upgrade; any real difference (a value, an arm, their order, the texts)
        is another run."""
        return self.sha256 == other.sha256 or self.canonical() == other.canonical()


def _canonical(plan: Plan, corpus: Corpus) -> dict[str, Any]:
    # JSON objects are unordered once sorted; the arm order (A before B) is kept apart.
    # Where the loads run ([scale]) is not what is measured: a run may resume elsewhere.
    # Comparisons left at their default are left out, so that a plan locked before they
    # existed keeps its sha256.
    dumped = plan.model_dump(mode="json", exclude={"scale"})
    if dumped["comparisons"] is None:
        del dumped["comparisons"]
    if not dumped["launch"]["keep_caches"]:
        del dumped["launch"]["keep_caches"]
    if plan.design == DesignSpec():  # [design] came later: its default keeps the sha256
        del dumped["design"]
    if plan.confirmation is None:
        del dumped["confirmation"]
    if plan.budget_s is None:  # came later, with what it cut
        del dumped["budget_s"], dumped["sized"]
    if plan.cost_loads is None:
        del dumped["cost_loads"]
    if not plan.adaptive and plan.max_cost_loads == Plan.model_fields["max_cost_loads"].default:
        del dumped["adaptive"], dumped["max_cost_loads"]  # came later: the sha256 stays
    if plan.loads == "separate":
        del dumped["loads"]  # came later too
    # so are a probe's settings added after it was locked with it (ProbeSettings)
    for settings in plan.probes.sections():
        table = dumped.get("probes", {}).get(settings.section, {})
        for key, default in settings.later_defaults.items():
            if key in table and table[key] == default:
                del table[key]
    out = {
        "plan": dumped,
        "arm_order": list(plan.arms),
        "corpus": corpus.model_dump(mode="json"),
    }
    # the factors' order names the arms and maps a design's columns; the sorted lock loses
    # it, and a fraction has no arm of each factor alone to read it back from
    if plan.factors and not plan.made_design().full:
        out["factor_order"] = list(plan.factors)
    return out


def digest(canonical: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


def load_plan_file(path: Path) -> tuple[Plan, Corpus]:
    """Parse, validate and resolve a plan file; every failure is a PlanError/CorpusError."""
    return resolve_plan(read_plan_file(path), source=str(path), base_dir=path.parent)


def read_plan_file(path: Path) -> dict[str, Any]:
    """A plan file's tables as written; every failure is a PlanError."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanError(f"{path}: plan file not found") from None
    except UnicodeDecodeError as exc:
        raise PlanError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise PlanError(f"{path}: cannot read plan file ({exc.strerror})") from None
    return raw


def model_problem(model: object, base_url: object, engine: object, source: str,
                  base_dir: Path) -> str | None:
    """What is wrong with the plan's model: a name that is neither built in, nor a path
    here, nor a hub id that this engine loads."""
    if base_url is not None or not isinstance(model, str) or model in BUILTIN_MODELS:
        return None
    if models.local_path(model, base_dir).exists():
        return None
    loaders = [name for name in registry.ENGINES
               if registry.create(name).hub_revision_flag is not None]
    if hub_id(model) is not None:
        if engine in loaders or not isinstance(engine, str) or engine not in registry.ENGINES:
            return None
        return (f"{source}: model: {model!r} is not a path here, and `{engine}` is not given "
                f"hub ids (servediff gives them to {', '.join(loaders)} and to an "
                "external endpoint); give the path of its files")
    return (f"{source}: model: {model!r} is neither a built-in model "
            f"({', '.join(BUILTIN_MODELS)}), nor an existing path, nor a hub id "
            "(`org/name` or `org/name@revision`)" + suggest(model, BUILTIN_MODELS))


def secret_problems(plan: Plan, source: str) -> list[str]:
    """Literal secrets in the plan's env and arguments (the lock would keep them), and env
    references (`"${NAME}"`) to variables that are not set here."""
    out = secret_env.literal_problems(f"{source}: launch", plan.launch.env,
                                      plan.launch.command or [])
    for name, arm in plan.arms.items():
        out += secret_env.literal_problems(f"{source}: arms.{name}", arm.env,
                                           [*arm.args, *(arm.command or [])])
    for where, env in [("launch", plan.launch.env),
                       *((f"arms.{n}", a.env) for n, a in plan.arms.items())]:
        out += [f"{source}: {where}.env: refers to ${{{name}}}, which is not set in the "
                "environment servediff runs in" for name in secret_env.missing(env)]
    return out


def resolve_plan(raw: dict[str, Any], source: str, base_dir: Path) -> tuple[Plan, Corpus]:
    """The plan and its corpus; every mistake found in the plan is named at once."""
    problems: list[str] = []
    try:
        plan: Plan | None = Plan.model_validate(raw)
    except ValidationError as exc:
        problems.append(describe(exc, source, model=Plan))
        plan = None
    if plan is None:
        # what can be checked without a valid plan is still checked
        engine = raw.get("engine")
        if isinstance(engine, str) and engine not in registry.ENGINES:
            problems.append(unknown_engine(engine, source))
        if problem := model_problem(raw.get("model"), raw.get("base_url"), raw.get("engine"),
                                    source, base_dir):
            problems.append(problem)
        raise PlanError("\n".join(problems))
    try:
        validate_engine(plan, source)
    except PlanError as exc:
        problems.append(str(exc))
    if problem := model_problem(plan.model, plan.base_url, plan.engine, source, base_dir):
        problems.append(problem)
    problems += secret_problems(plan, source)
    if problems:
        raise PlanError("\n".join(problems))
    if plan.corpus.source == "file":
        if not plan.corpus.path:
            raise PlanError(f"{source}: corpus.path: required when corpus.source = \"file\"")
        corpus = load_corpus(base_dir / plan.corpus.path)
    else:
        if plan.corpus.path:
            raise PlanError(f"{source}: corpus.path: only allowed when corpus.source = \"file\"")
        corpus = load_corpus(None)
    corpus = corpus.select(plan.corpus.tags, plan.corpus.max_texts, source)
    return plan, corpus


def cache_policy(plan: Plan, arm: str) -> CachePolicy:
    return plan.arms[arm].cache_policy or plan.launch.cache_policy


def launch_command(plan: Plan, arm: str) -> list[str] | None:
    """The arm's command template: its own (another build), else the plan's launch's."""
    return plan.arms[arm].command or plan.launch.command


def arm_options(plan: Plan, arm: str) -> EngineOptions:
    """The arm's engine options: the plan's, with the arm's own merged over them."""
    adapter = registry.create(plan.engine)
    merged = {**plan.engine_options, **plan.arms[arm].options}
    return adapter.options_model.model_validate(merged)


def unknown_engine(engine: str, source: str) -> str:
    return (f"{source}: engine: unknown engine {engine!r}; known engines: {registry.known()}"
            + suggest(engine, list(registry.ENGINES)))


def validate_engine(plan: Plan, source: str) -> None:
    """Check the plan against its engine: options per arm, launch or external endpoint."""
    if plan.engine not in registry.ENGINES:
        raise PlanError(unknown_engine(plan.engine, source))
    adapter = registry.create(plan.engine)
    if "reload" in adapter.capabilities:
        if plan.base_url is not None:
            raise PlanError(f"{source}: base_url: engine {plan.engine!r} is started by "
                            "servediff; base_url is only for engine = \"openai\"")
    else:
        if plan.base_url is None:
            raise PlanError(f"{source}: base_url: required for engine {plan.engine!r} "
                            "(an endpoint servediff does not start)")
        if plan.loads_per_arm != 1:
            raise PlanError(f"{source}: loads_per_arm: must be 1 for an external endpoint; "
                            "servediff cannot reload a server it did not start")
        if plan.launch.command is not None:
            raise PlanError(f"{source}: launch.command: an external endpoint is not launched")
        for name, arm in plan.arms.items():
            if arm.command is not None:
                raise PlanError(f"{source}: arms.{name}.command: an external endpoint is "
                                "not launched")
            if arm.args or arm.env:
                raise PlanError(f"{source}: arms.{name}: args and env need a server that "
                                "servediff starts; an external endpoint takes options only")
    options_model = adapter.options_model
    problems = [f"{source}: {why}" for x in plan.probes.sections()
                if (why := x.refused(plan.engine, adapter.capabilities))]
    try:
        options_model.model_validate(plan.engine_options)
    except ValidationError as exc:
        problems.append(describe(exc, source, "engine_options", options_model))
    for name, arm in plan.arms.items():
        try:  # the arm's own options; the shared ones are named once, above
            options_model.model_validate({**plan.engine_options, **arm.options})
        except ValidationError as exc:
            own = [e for e in exc.errors() if e["loc"] and e["loc"][0] in arm.options]
            if own or not problems:
                problems.append(describe(exc, source, f"arms.{name}.options", options_model,
                                         only=own or None))
    if plan.loads == "combined" and plan.base_url is None:
        problems += [f"{source}: {why}" for name in plan.arms
                     if (why := not_combinable(adapter, plan, name))]
    if problems:
        raise PlanError("\n".join(problems))


def not_combinable(adapter: EngineAdapter, plan: Plan, arm: str) -> str | None:
    """Why a combined load cannot serve this arm's drift and cost probes in one start: its
    drift probes isolate the prefix cache that its cost probes measure as configured."""
    options = arm_options(plan, arm)
    if adapter.as_configured(options) == options:
        return None
    field = adapter.cache_option
    return (f'loads: "combined" needs every arm to serve drift and cost work alike; '
            f"`{arm}` does not: its drift probes run with {adapter.name}'s prefix cache off "
            f"(per-load isolation) and its cost probes with the cache as the arm leaves it. "
            f"Set engine_options.{field} (or arms.{arm}.options.{field}) to say which, or "
            'use loads = "separate"')


def lock(plan: Plan, corpus: Corpus) -> LockedPlan:
    return LockedPlan(plan=plan, corpus=corpus, sha256=digest(_canonical(plan, corpus)))


def plan_diff(old: LockedPlan, new: LockedPlan) -> str:
    a = json.dumps(old.canonical()["plan"], indent=1, sort_keys=True).splitlines()
    b = json.dumps(new.canonical()["plan"], indent=1, sort_keys=True).splitlines()
    diff = list(difflib.unified_diff(a, b, "locked plan", "this plan", lineterm="", n=1))
    if old.corpus != new.corpus:
        diff.append(f"corpus: {len(old.corpus.texts)} texts locked, {len(new.corpus.texts)} now, "
                    "contents differ")
    return "\n".join(diff)
