"""What the trap registry asks of a finding beyond its evidence: where it applies and, when
the arms are different engine builds, the chain of pins.

`applicability` has the registry's condition fields (the ones its diagnosis contract
compares a user's conditions against: GPU architecture, device class, node count,
parallelism, topology, serving stack, stack version, model family, exact checkpoint,
quantization, context regime, concurrency regime, failure stage, operating system), each a
list of lower-case values, filled only from what the run recorded: a field the run says
nothing about stays empty, which the registry reads as not documented.

`pin_chain` follows the registry's repro -> fix -> known-good contract: for each arm whose
engine build differs from the baseline's and whose drift or cost differs, the build where
it appears (BROKEN_PIN) and the build where the same probe no longer shows it
(KNOWN_GOOD_PIN, a tested known-good pin: servediff compares two builds, it does not
bisect to the first good one, and it does not know the change between them: FIXED_BY is
UNKNOWN). A bisection's chain (`bisected_chain`) knows more: its first bad build is the
breaking build (FIXED_BY names it, and the last good build before it), and its two
bundles are the repros on each pin.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from servediff.analysis.findings import Summary
from servediff.bundle import Evidence

# GPU names (as NVML gives them) to the architecture the registry names
ARCHITECTURES = (("b200", "blackwell"), ("gb200", "blackwell"), ("gb10", "blackwell"),
                 ("rtx 50", "blackwell"), ("h100", "hopper"), ("h200", "hopper"),
                 ("h20", "hopper"), ("gh200", "hopper"), ("l40", "ada"), ("l4", "ada"),
                 ("rtx 40", "ada"), ("a100", "ampere"), ("a10", "ampere"), ("a30", "ampere"),
                 ("rtx 30", "ampere"), ("v100", "volta"), ("t4", "turing"))
STACKS = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp",
          "transformers": "transformers"}
QUANT = re.compile(r"\b(q\d{1,2}(?:_[a-z0-9]+)?|iq\d_[a-z]+|fp8|nvfp4|int[48]|awq|gptq)\b")
PARALLEL = {"--tensor-parallel-size": "tp", "--tp-size": "tp", "--tp": "tp",
            "--pipeline-parallel-size": "pp", "--pp-size": "pp", "--data-parallel-size": "dp"}
Repro = Literal["PASS", "NOT_RUN", "INCONCLUSIVE"]


class Applicability(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu_architecture: list[str]
    device_class: list[str]
    node_count: list[str]
    parallelism: list[str]
    topology: list[str]
    serving_stack: list[str]
    stack_version: list[str]
    model_family: list[str]
    exact_checkpoint: list[str]
    quantization: list[str]
    context_regime: list[str]
    concurrency_regime: list[str]
    failure_stage: list[str]
    operating_system: list[str]


class PinChain(BaseModel):
    model_config = ConfigDict(extra="forbid")

    finding: str
    broken_arm: str
    good_arm: str
    BROKEN_PIN: str
    REPRO_BEFORE: Repro
    FIXED_BY: str
    KNOWN_GOOD_PIN: str
    REPRO_AFTER: Repro
    # a bisection's chain: the evidence sha256 of the bundles measured on each pin
    repro_before_evidence: str | None = None
    repro_after_evidence: str | None = None


def _sorted(values: set[str]) -> list[str]:
    return sorted(v.lower() for v in values if v)


def applicability(evidence: Evidence, summary: Summary) -> Applicability:
    launches = [x for rec in evidence.loads for x in rec.launches]
    gpus = {g for g in summary.setup.gpus}
    architectures = {arch for name in gpus for key, arch in ARCHITECTURES
                     if key in name.lower()}
    args = [a for x in launches for a in x.command]
    parallel = {f"{PARALLEL[a]}={args[i + 1]}" for i, a in enumerate(args[:-1])
                if a in PARALLEL and args[i + 1] != "1"}
    machines = {x.machine for x in launches if x.machine}
    sources = [x.model_source for x in launches if x.model_source is not None]
    checkpoints = {s.hub_repo + (f"@{s.hub_commit}" if s.hub_commit else "")
                   for s in sources if s.hub_repo} or {summary.model}
    checkpoints |= {f"sha256:{sha}" for sha in summary.setup.weights_sha256}
    names = " ".join([summary.model, *(s.served for s in sources)]).lower()
    dtypes = {str(x.options.get("dtype")) for x in launches if x.options.get("dtype")} | {
        str(x.engine.get("dtype")) for x in launches if x.engine.get("dtype")}
    levels = {g.level for c in evidence.cells for g in c.groups} | {
        s.concurrency for c in evidence.cells for s in c.speed} | {
        p.level for c in evidence.cells for p in c.sweep}
    longest = max((p.length for c in evidence.cells for p in c.sweep), default=None)
    contexts = {f"{n:,} tokens context" for n in summary.setup.context_lengths}
    if longest is not None:
        contexts.add(f"{longest:,} tokens prompt")
    stages = set()
    if any(x.seconds_to_ready is None and not x.external for x in launches):
        stages.add("startup")
    if any(p.outcome in ("error", "death", "hang", "timeout")
           for c in evidence.cells for p in c.sweep):
        stages.add("prefill")
    if any(f.died_before_stop for f in summary.failed_launches):
        stages.add("sustained")
    return Applicability(
        gpu_architecture=_sorted(architectures),
        device_class=_sorted(gpus or {f"cpu {c}" for c in summary.setup.cpu}),
        node_count=[str(len(machines))] if machines else [],
        parallelism=_sorted(parallel),
        topology=["single-node"] if len(machines) == 1 else
        [f"{len(machines)}-node"] if machines else [],
        serving_stack=[STACKS.get(summary.engine, summary.engine)],
        stack_version=_sorted(set(summary.setup.engine_versions)),
        model_family=[],
        exact_checkpoint=_sorted(checkpoints),
        quantization=_sorted(set(QUANT.findall(names)) | dtypes),
        context_regime=_sorted(contexts),
        concurrency_regime=[f"concurrency={n}" for n in sorted(levels)],
        failure_stage=_sorted(stages),
        operating_system=_sorted({c.conditions.system for c in evidence.cells
                                  if c.conditions.system}),
    )


def builds(evidence: Evidence) -> dict[str, str]:
    """Each arm's engine build as its launches reported it (versions, then the binary)."""
    out: dict[str, set[str]] = {}
    for rec in evidence.loads:
        for x in rec.launches:
            versions = ", ".join(f"{k}={v}" for k, v in sorted(x.engine_versions().items())
                                 if v is not None)
            if versions or x.command:
                out.setdefault(rec.arm, set()).add(versions or x.command[0])
    return {arm: " | ".join(sorted(found)) for arm, found in out.items()}


def pin_chains(evidence: Evidence, summary: Summary) -> list[PinChain]:
    """The chain of pins for each arm of another engine build whose finding differs."""
    built = builds(evidence)
    chains = []
    for pair in summary.verdict.pairs:
        base, arm = built.get(pair.baseline), built.get(pair.arm)
        if base is None or arm is None or base == arm:
            continue
        stable = {name: a.signature.stable for name, a in summary.arms.items()}
        findings: list[tuple[str, str, str]] = []  # (finding, broken arm, good arm)
        if stable.get(pair.baseline) and stable.get(pair.arm) is False:
            findings.append(("drift", pair.arm, pair.baseline))
        if stable.get(pair.arm) and stable.get(pair.baseline) is False:
            findings.append(("drift", pair.baseline, pair.arm))
        if pair.costs:
            findings.append((f"{pair.costs} cost(s) against `{pair.baseline}`", pair.arm,
                             pair.baseline))
        for finding, broken, good in findings:
            chains.append(PinChain(finding=finding, broken_arm=broken, good_arm=good,
                                   BROKEN_PIN=built[broken], REPRO_BEFORE="PASS",
                                   FIXED_BY="UNKNOWN", KNOWN_GOOD_PIN=built[good],
                                   REPRO_AFTER="PASS"))
    return chains


def bisected_chain(finding: str, good: Evidence, bad: Evidence, last_good: str,
                   first_bad: str, between: list[str], engine: str,
                   hashes: tuple[str, str]) -> PinChain:
    """A bisection's pins: the first bad build broken, the last good build before it the
    known-good pin, each measured by its own bundle (`hashes`: their evidence sha256, bad
    then good); FIXED_BY names the breaking build, commits between builds untested."""
    skipped = (f"; or one of {', '.join(between)}, which could not be measured" if between
               else "")

    def pin(build: str, evidence: Evidence) -> str:
        # the build as the bisection got it; a server's own report may say less (a
        # llama-server built from a source package reports build b0-unknown)
        reported = " | ".join(builds(evidence).values())
        return f"{engine} build {build}" + (f" (its server reports: {reported})"
                                            if reported else "")

    return PinChain(
        finding=finding, broken_arm=f"build {first_bad}", good_arm=f"build {last_good}",
        BROKEN_PIN=pin(first_bad, bad), REPRO_BEFORE="PASS",
        FIXED_BY=(f"the breaking build: {engine} build {first_bad}, the first after build "
                  f"{last_good}{skipped} (bisected over builds; the commits between the two "
                  "were not bisected)"),
        KNOWN_GOOD_PIN=pin(last_good, good), REPRO_AFTER="PASS",
        repro_before_evidence=hashes[0], repro_after_evidence=hashes[1])
