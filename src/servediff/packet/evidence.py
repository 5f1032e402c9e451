"""The evidence packet (schema "1.0"): one run as a registry-ready finding.

Built from the bundle and its analysis only (never from a live engine):
target with an exact revision, the hypothesis with the observations that
confirm or disprove it, environment, execution, controls, a sha256 for every
artifact, review roles, the claim and what was scrubbed. The packet is
scrubbed like every report and validated against the schema shipped with
servediff before it is written.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, JsonValue

from servediff.analysis.findings import Summary
from servediff.bundle import (
    DERIVED,
    MANIFEST_SCHEMA_VERSION,
    Layout,
    evidence_sha256,
    read_evidence,
    read_versioned,
)
from servediff.errors import InputError
from servediff.evidence import cell_name
from servediff.hub import hub_id
from servediff.report import words
from servediff.report.markdown import protocol
from servediff.scrub import policy, scrub_tree
from servediff.trapfields import Applicability, PinChain, applicability, pin_chains

SCHEMA_VERSION = "1.0"


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Observation(Part):
    text: str
    evidence: list[str]


class ArmTarget(Part):
    name: str
    args: list[str]
    env: dict[str, str]
    options: dict[str, JsonValue]


class Target(Part):
    engine: str
    engine_versions: list[str]
    model: str
    revision: str
    revision_kind: RevisionKind
    weights_sha256: dict[str, str]
    arms: list[ArmTarget]


class Hypothesis(Part):
    statement: str
    confirming_observations: list[Observation]
    disproving_observations: list[Observation]


class Environment(Part):
    devices: list[str]
    cpu: list[str]
    gpus: list[str]
    python: list[str]
    context_lengths: list[int]


class Execution(Part):
    started_at: str
    ended_at: str
    observed_count: int
    launches: int
    stop_status: Literal["completed", "partial"]
    failure_cause: str | None
    protocol: str


class Artifact(Part):
    path: str
    sha256: str
    bytes: int
    role: Literal["raw", "derived", "manifest"]


class Control(Part):
    name: str
    status: Literal["passed", "failed", "not run"]
    detail: str


class Role(Part):
    role: Literal["contributor", "reviewer", "maintainer"]
    status: Literal["submitted", "pending", "approved", "rejected"]


class Review(Part):
    roles: list[Role]


class PacketClaim(Part):
    text: str
    evidence_status: str
    rederive_command: str
    evidence_sha256: str


class Sanitization(Part):
    scrubbed: bool
    scrubbed_kinds: dict[str, int]
    hosts_redacted: bool
    paths_redacted: bool
    secrets_redacted: bool
    raw_logs_included: bool


class EvidencePacket(Part):
    """The packet as schema 1.0 (schemas/evidence-packet-1.0.json) describes it."""

    schema_version: Literal["1.0"] = "1.0"
    packet_id: str
    experiment_id: str
    created_at: str
    target: Target
    hypothesis: Hypothesis
    environment: Environment
    execution: Execution
    artifacts: list[Artifact]
    controls: list[Control]
    review: Review
    claim: PacketClaim
    # where the finding applies, in the trap registry's condition fields, and the chain of
    # pins when the arms are different engine builds (trapfields.py)
    applicability: Applicability
    pin_chain: list[PinChain]
    sanitization: Sanitization | None = None


EVIDENCE_STATUS = "contributor-measured, conditions as reported"
# Names that move: a packet identified only by one of these cannot be re-measured.
MUTABLE = {"main", "master", "latest", "head", "dev", "nightly", "stable", "default"}


def schema() -> dict[str, JsonValue]:
    text = resources.files("servediff.schemas").joinpath("evidence-packet-1.0.json").read_text()
    loaded: dict[str, JsonValue] = json.loads(text)
    return loaded


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


RevisionKind = Literal["weights-sha256", "hub-commit", "given"]


def target_revision(model: str, weights: dict[str, str], given: str | None
                    ) -> tuple[str, RevisionKind]:
    """(revision, kind): the weights' sha256 when servediff hashed them, else what the user
    gives; a mutable name alone is refused with what to pin."""
    if given is not None:
        if given.strip().lower() in MUTABLE:
            raise InputError(f"--revision {given!r} is a name that moves (a branch or tag); "
                             "pin the model: pass the commit sha of the model repository or "
                             "the sha256 of its weights")
        return given, "given"
    if weights:
        first = sorted(weights)[0]
        return f"sha256:{weights[first]}", "weights-sha256"
    named = hub_id(model)
    if named is not None and named.pinned and named.revision is not None:
        return named.revision, "hub-commit"  # a commit cannot move, hashed or not
    tail = model.rsplit("@", 1)[-1].rsplit(":", 1)[-1] if ("@" in model or ":" in model) else ""
    what = f"its mutable revision `{tail}`" if tail.lower() in MUTABLE else "its name"
    why = (" (not in the local hub cache when it ran: the engine was given the hub id)"
           if hub_id(model) is not None else " (an external endpoint?)")
    raise InputError(f"the model `{model}` is identified only by {what}: servediff did not "
                     f"hash its weights{why}; pin it: pass --revision with the commit sha of "
                     "the model repository or the sha256 of its weights")


def artifacts(root: Path) -> list[Artifact]:
    manifest = read_versioned(Layout(root).manifest, MANIFEST_SCHEMA_VERSION)
    out = [Artifact(path=name, sha256=sha, bytes=(root / name).stat().st_size,
                    role="derived" if name in DERIVED else "raw")
           for name, sha in sorted(manifest["files"].items())]
    data = Layout(root).manifest.read_bytes()
    out.append(Artifact(path="manifest.json", sha256=hashlib.sha256(data).hexdigest(),
                        bytes=len(data), role="manifest"))
    return out


def controls(summary: Summary) -> list[Control]:
    out = []
    concs = [(arm, a.concurrency) for arm, a in summary.arms.items() if a.concurrency]
    if concs:
        failed = [arm for arm, c in concs if not c.control_ok]
        out.append(Control(name="concurrency-1 control (identical requests sent one at a "
                           "time agree)", status="failed" if failed else "passed",
                           detail=f"failed for {', '.join(failed)}" if failed else
                           f"held for {', '.join(arm for arm, _ in concs)}"))
    else:
        out.append(Control(name="concurrency-1 control", status="not run",
                           detail="no concurrency probe in this run"))
    reported = [x for a in summary.setup.arms.values() for x in a.first_request_cached_tokens
                if x is not None]
    out.append(Control(name="cold start (no cached prompt tokens on the first request after "
                       "a start)", status="not run" if not reported else
                       "failed" if any(reported) else "passed",
                       detail=f"{len(reported)} starts reported cached tokens" if reported
                       else "the engine does not report cached tokens"))
    within = [p for a in summary.arms.values() for p in a.within_load]
    out.append(Control(name="within-load repeat (the same texts again in the same process)",
                       status="not run" if not within else
                       "passed" if not any(p.moved for p in within) else "failed",
                       detail=f"{len(within)} repeat comparison(s)"))
    failed_launches = summary.failed_launches
    out.append(Control(name="every engine stopped cleanly and was recorded",
                       status="passed" if not failed_launches else "failed",
                       detail=f"{len(failed_launches)} launch(es) failed or died"))
    return out


def hypothesis(summary: Summary) -> Hypothesis:
    arms = list(summary.arms)
    statement = (f"Teacher-forced scores of `{summary.model}` on `{summary.engine}` are "
                 "reproducible across cold loads, repeats and concurrency under every arm"
                 + (f", and no arm costs {words.costs_of(summary.probe_findings, MEASURED)} "
                    f"relative to `{arms[0]}`" if len(arms) > 1 else "") + ".")
    confirming: list[Observation] = []
    disproving: list[Observation] = []
    for arm, data in summary.arms.items():
        cells = [Layout.cell_ref(cell_name(arm, r.load, "score", 0)) for r in data.loads]
        obs = Observation(text=f"`{arm}`: {words.signature_text(data.signature)}",
                          evidence=cells)
        (confirming if data.signature.stable else disproving).append(obs)
    for pair in summary.verdict.pairs:
        for c in pair.claims:
            if c.kind == "cost":
                disproving.append(Observation(text=words.claim_text(c), evidence=c.evidence))
        if not pair.costs:
            confirming.append(Observation(text=words.headline(pair), evidence=[]))
    return Hypothesis(statement=statement, confirming_observations=confirming,
                      disproving_observations=disproving)


# What every run says an arm may cost (with what each probe of its own compares).
MEASURED = ("speed", "capacity", "survival")
# Gaps that mean a planned measurement did not happen.
INCOMPLETE = ("loads missing", "sweep points missing")


HOSTS = ("hostname", "ipv4 address", "ipv6 address", "user@host", "bucket", "repository")


def build(root: Path, summary: Summary, given_revision: str | None,
          pins: list[PinChain] | None = None, claimed: str | None = None) -> EvidencePacket:
    """The packet of the run at `root`; `pins` and `claimed`: a bisection's pin chain and
    claim, in place of those read from the run's own arms."""
    evidence = read_evidence(root)
    plan = evidence.plan
    weights = {k: v for rec in evidence.loads for launch in rec.launches
               for k, v in launch.weights_sha256.items()}
    revision, kind = target_revision(plan.model, weights, given_revision)
    launches = [launch for rec in evidence.loads for launch in rec.launches]
    starts = [launch.started_at for launch in launches]
    ends = [launch.finished_at or launch.started_at for launch in launches]
    observed = sum(c.observations for c in evidence.cells)
    failures = summary.failed_launches
    partial = bool(summary.partial_cells) or any(g.kind in INCOMPLETE for g in summary.gaps)
    evidence_hash = evidence_sha256(root)
    setup = summary.setup
    pairs = summary.verdict.pairs
    claim = claimed or (" ".join(words.headline(p) + "." for p in pairs) if pairs else
                        "; ".join(f"`{arm}`: {words.signature_text(a.signature)}"
                                  for arm, a in summary.arms.items()))
    packet = EvidencePacket(
        packet_id=f"sdp-{evidence_hash[:16]}", experiment_id=summary.plan_sha256[:16],
        created_at=_iso(max(ends) if ends else 0.0),
        target=Target(engine=plan.engine, engine_versions=setup.engine_versions,
                      model=plan.model, revision=revision, revision_kind=kind,
                      weights_sha256=weights,
                      arms=[ArmTarget(name=arm, args=spec.args, env=spec.env,
                                      options=spec.options)
                            for arm, spec in plan.arms.items()]),
        hypothesis=hypothesis(summary),
        environment=Environment(devices=setup.devices, cpu=setup.cpu, gpus=setup.gpus,
                                python=setup.python, context_lengths=setup.context_lengths),
        execution=Execution(
            started_at=_iso(min(starts) if starts else 0.0),
            ended_at=_iso(max(ends) if ends else 0.0), observed_count=observed,
            launches=len(launches), stop_status="partial" if partial else "completed",
            failure_cause="; ".join(words.failed_launch_text(f) for f in failures) or None,
            protocol=protocol(setup)),
        artifacts=artifacts(root), controls=controls(summary),
        review=Review(roles=[Role(role="contributor", status="submitted"),
                             Role(role="reviewer", status="pending")]),
        claim=PacketClaim(text=claim, evidence_status=EVIDENCE_STATUS,
                          rederive_command="servediff verify RUN && servediff rederive RUN",
                          evidence_sha256=evidence_hash),
        applicability=applicability(evidence, summary),
        pin_chain=pin_chains(evidence, summary) if pins is None else pins)
    tree, counts = scrub_tree(packet.model_dump(mode="json", exclude={"sanitization"}),
                              policy=policy(plan.scrub.allow_hosts, plan.scrub.deny_hosts))
    kinds = dict(counts)
    clean = EvidencePacket.model_validate(tree).model_copy(update={"sanitization": Sanitization(
        scrubbed=True, scrubbed_kinds=kinds,
        hosts_redacted=any(k in kinds for k in HOSTS),
        paths_redacted="path" in kinds,
        secrets_redacted=any(k not in (*HOSTS, "path", "username", "e-mail address")
                             for k in kinds),
        raw_logs_included=False)})
    try:
        jsonschema.validate(clean.model_dump(mode="json"), schema())
    except jsonschema.ValidationError as exc:  # a bug in servediff, not bad input
        raise AssertionError(f"evidence packet does not match its schema: {exc.message} "
                             f"at {'/'.join(str(p) for p in exc.absolute_path)}") from None
    return clean
