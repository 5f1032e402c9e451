"""The packet of a bisection: the first bad build's bundle as the repro, and the pin chain
from the bisection (the last good build the known-good pin, the first bad build the
breaking one), each pin with the evidence sha256 of its own bundle."""

from __future__ import annotations

from pathlib import Path

from servediff.analysis.findings import Summary
from servediff.bisection import BISECT_FILE, read_bisection
from servediff.bundle import evidence_sha256, read_evidence, verify
from servediff.derived import write_derived
from servediff.errors import InputError
from servediff.packet.evidence import EvidencePacket, build
from servediff.trapfields import bisected_chain


def bisection_packet(root: Path, revision: str | None
                     ) -> tuple[EvidencePacket, Path, Summary]:
    """The packet of the bisection in `root`, the repro bundle it hashes, and its summary."""
    found = read_bisection(root)
    steps = {s.build: s for s in found.steps}
    if found.outcome != "found" or not (found.last_good and found.first_bad):
        raise InputError(f"{root / BISECT_FILE}: the bisection found no flip ({found.why}); "
                         "a packet needs a first bad build")
    bad, good = steps[found.first_bad], steps[found.last_good]
    if bad.bundle is None or good.bundle is None:
        raise InputError(f"{root / BISECT_FILE}: the builds around the flip have no bundle")
    runs = root / bad.bundle, root / good.bundle
    for run in runs:
        verify(run)
    summary = write_derived(runs[0])
    broken = read_evidence(runs[0])
    engine = broken.plan.engine
    finding = f"per-text scores differ from build {found.builds[0]}'s: {bad.why}"
    chain = bisected_chain(finding, read_evidence(runs[1]), broken,
                           found.last_good, found.first_bad, found.between, engine,
                           (evidence_sha256(runs[0]), evidence_sha256(runs[1])))
    claim = (f"{engine} build {found.first_bad} is the first build whose {finding} "
             f"{found.why}")
    return build(runs[0], summary, revision, [chain], claim), runs[0], summary
