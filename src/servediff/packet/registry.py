"""The evidence packet in the trap registry's own shape (its schema 1.0), made from
servediff's packet after it is scrubbed, so that nothing in it is unscrubbed.

The registry's packet is closed: it has no field for where a finding applies or for the
chain of pins. Those stay in servediff's packet (`applicability`, `pin_chain`); here the
claim boundary names them in words, so a reader of this file alone sees them.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, JsonValue

from servediff import __version__
from servediff.analysis.findings import ArmGap, Summary
from servediff.bundle import read_lock
from servediff.packet.evidence import MEASURED, EvidencePacket
from servediff.report import words
from servediff.scrub import policy, scrub_tree
from servediff.trapfields import Applicability

SCHEMA = "registry-evidence-packet-1.0.json"

ArtifactType = Literal["raw_log", "raw_response", "request", "stdout", "stderr", "manifest",
                       "screenshot", "metric", "other"]


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Target(Part):
    target_class: Literal["SERVING_STACK"] = "SERVING_STACK"
    repository_or_project: str
    exact_revision: str
    identity_verification_status: Literal["VERIFIED", "CLAIMED_UNVERIFIED", "UNAVAILABLE"]


class Hypothesis(Part):
    claim_under_test: str
    expected_confirming_observation: str
    expected_disproof_observation: str


class Environment(Part):
    runtime_or_build_revision: str
    model_identity: str
    engine_identity: str
    tool_versions: dict[str, str]
    configuration_identity: str
    isolation_workspace_identity: str


class Execution(Part):
    started_at: str
    ended_at: str
    request_or_command_id: str
    authentication_interpretation: Literal["NOT_APPLICABLE", "UNKNOWN"]
    completion_stop_status: Literal["COMPLETED", "ABORTED"]
    failure_cause: Literal["NONE", "UNKNOWN_UNADJUDICATED"]
    observed_count: int
    summary_only: bool = False


class Artifact(Part):
    ref: str
    sha256: str
    type: ArtifactType
    redacted: bool
    original_or_derived: Literal["original", "derived"]
    bytes_available_locally: bool


class Controls(Part):
    positive_control: str
    negative_control: str
    control_independence_status: Literal["SHARED_HARNESS"] = "SHARED_HARNESS"
    shares_same_harness: bool = True


class Review(Part):
    proposer: str
    reproducer: str
    falsifier: str
    adjudicator: str
    independence_status: Literal["INDEPENDENT_REVIEW_NOT_AVAILABLE"] = \
        "INDEPENDENT_REVIEW_NOT_AVAILABLE"


class Claim(Part):
    evidence_status: str
    claim_boundary: str
    disposition: Literal["UNNUMBERED_DRAFT", "INCOMPLETE"]
    unresolved_conditions: list[str]
    capability_claim_kind: Literal["MODEL_OR_RUNTIME"] = "MODEL_OR_RUNTIME"


class Sanitization(Part):
    safe_public: bool
    contains_private_identifiers: bool
    contains_secrets: bool
    redaction_performed: bool
    allowed_for_public_intake: bool


class RegistryPacket(Part):
    schema_version: Literal["1.0"] = "1.0"
    packet_id: str
    experiment_id: str
    target: Target
    hypothesis: Hypothesis
    environment: Environment
    execution: Execution
    artifacts: list[Artifact]
    controls: Controls
    review: Review
    claim: Claim
    sanitization: Sanitization


def schema() -> dict[str, JsonValue]:
    loaded: dict[str, JsonValue] = json.loads(
        resources.files("servediff.schemas").joinpath(SCHEMA).read_text())
    return loaded


def artifact_type(path: str) -> ArtifactType:
    if path == "manifest.json":
        return "manifest"
    if path.startswith("logs/"):
        return "raw_log"
    if path.startswith(("cells/", "partial/")):
        return "raw_response"
    if path.startswith("loads/"):
        return "stdout"  # what the engine and servediff recorded of each launch
    if path in ("summary.json", "summary.public.json"):
        return "metric"
    return "other"


def applies_to(where: Applicability) -> str:
    """The applicability block in one line: `field=value,value; ...`, set fields only."""
    fields = where.model_dump()
    return "; ".join(f"{k}={','.join(v)}" for k, v in fields.items() if v)


def registry_packet(root: Path, packet: EvidencePacket, summary: Summary) -> RegistryPacket:
    """servediff's (scrubbed) packet in the registry's shape, scrubbed again (the summary's
    words it adds) and validated against the registry's schema."""
    target, execution = packet.target, packet.execution
    versions = ", ".join(target.engine_versions) or "not reported by the engine"
    controls = {c.name.split(" (")[0]: f"{c.name}: {c.status} ({c.detail})"
                for c in packet.controls}
    positive = [v for k, v in controls.items() if k.startswith("concurrency-1")]
    negative = [v for k, v in controls.items() if k.startswith("within-load")]
    pins = "; ".join(f"{p.finding}: BROKEN_PIN={p.BROKEN_PIN}, REPRO_BEFORE={p.REPRO_BEFORE}, "
                     f"FIXED_BY={p.FIXED_BY}, KNOWN_GOOD_PIN={p.KNOWN_GOOD_PIN} (tested "
                     f"known-good pin), REPRO_AFTER={p.REPRO_AFTER}" for p in packet.pin_chain)
    boundary = (f"{packet.claim.text} Measured by servediff {__version__} under the "
                f"protocol: {execution.protocol}. Applies to: {applies_to(packet.applicability)}."
                + (f" Pin chain: {pins}." if pins else "")
                + " Not claimed: anything outside these conditions; every number re-derives "
                f"from the bundle ({packet.claim.rederive_command}).")
    unresolved = [*summary.verdict.not_tested,
                  *(f"gap: {g.kind}" + (f" ({g.arm})" if isinstance(g, ArmGap) else "")
                    for g in summary.gaps)]
    kinds = packet.sanitization.scrubbed_kinds if packet.sanitization else {}
    out = RegistryPacket(
        packet_id=packet.packet_id, experiment_id=packet.experiment_id,
        target=Target(repository_or_project=target.engine, exact_revision=versions,
                      identity_verification_status="VERIFIED" if target.engine_versions
                      else "UNAVAILABLE"),
        hypothesis=Hypothesis(
            claim_under_test=packet.hypothesis.statement,
            expected_confirming_observation=(
                "every arm's teacher-forced scores agree within "
                f"{summary.threshold_abs_nll:g} nats per token across its cold loads, a "
                "repeat within a load and every concurrency level measured, and no arm "
                f"costs {words.costs_of(summary.probe_findings, MEASURED)}"),
            expected_disproof_observation=(
                "a text whose scores move beyond that between two cold loads, two passes "
                "of one load or two concurrency levels of one arm, or an arm that costs "
                + words.costs_of(summary.probe_findings, ("speed", "KV capacity",
                                 "survival of long or concurrent prompts")))),
        environment=Environment(
            runtime_or_build_revision=versions,
            model_identity=f"{target.model} ({target.revision_kind} {target.revision})",
            engine_identity=target.engine,
            tool_versions={"servediff": __version__,
                           **{f"python {i + 1}": v for i, v in
                              enumerate(packet.environment.python)}},
            configuration_identity="; ".join(
                f"{a.name}: args {' '.join(a.args) or '(none)'}" for a in target.arms),
            isolation_workspace_identity=(
                f"servediff run {packet.experiment_id}: every load a fresh engine process "
                "group on one machine, stopped and checked gone before the next")),
        execution=Execution(
            started_at=execution.started_at, ended_at=execution.ended_at,
            request_or_command_id=f"servediff run (plan {packet.experiment_id})",
            authentication_interpretation="NOT_APPLICABLE",
            completion_stop_status="COMPLETED" if execution.stop_status == "completed"
            else "ABORTED",
            failure_cause="NONE" if execution.stop_status == "completed"
            else "UNKNOWN_UNADJUDICATED",
            observed_count=execution.observed_count),
        artifacts=[Artifact(ref=a.path, sha256=a.sha256, type=artifact_type(a.path),
                            redacted=False, original_or_derived="derived"
                            if a.role == "derived" else "original",
                            bytes_available_locally=True) for a in packet.artifacts],
        controls=Controls(positive_control="; ".join(positive) or "not run",
                          negative_control="; ".join(negative) or "not run"),
        review=Review(proposer="servediff run (contributor)", reproducer="pending",
                      falsifier="pending", adjudicator="pending"),
        claim=Claim(evidence_status=packet.claim.evidence_status, claim_boundary=boundary,
                    disposition="UNNUMBERED_DRAFT" if execution.stop_status == "completed"
                    else "INCOMPLETE", unresolved_conditions=unresolved),
        sanitization=Sanitization(safe_public=True, contains_private_identifiers=False,
                                  contains_secrets=False, redaction_performed=bool(kinds),
                                  allowed_for_public_intake=True))
    plan = read_lock(root).plan
    tree, _ = scrub_tree(out.model_dump(mode="json"),
                         policy=policy(plan.scrub.allow_hosts, plan.scrub.deny_hosts))
    out = RegistryPacket.model_validate(tree)
    try:
        jsonschema.validate(out.model_dump(mode="json"), schema())
    except jsonschema.ValidationError as exc:  # a bug in servediff, not bad input
        raise AssertionError(f"registry packet does not match the registry's schema: "
                             f"{exc.message} at "
                             f"{'/'.join(str(p) for p in exc.absolute_path)}") from None
    return out
