"""Which cost comparisons are still unsure: what the adaptive rule adds cost loads for.

A speed comparison (one prompt length, level and metric of two arms) is unsure while
it is within noise, its band holding zero or its cost loads overlapping, or has too few
replicates for a band; a cost or a gain outside the noise is clear. The pairs read are
those the answer reads: each arm against its baseline (the verdict), and in a factor
plan the two arms of every contrast. Start-up is left out: its starts come from every
load, drift loads included, so cost loads are not what it lacks.
"""

from __future__ import annotations

from servediff.analysis.findings import Summary

UNSURE = ("within noise", "not enough replicates")


def unsure_pairs(summary: Summary) -> dict[tuple[str, str], list[str]]:
    """(arm a, arm b) -> the speed comparisons between them that are unsure, in words."""
    out: dict[tuple[str, str], list[str]] = {}
    for comp in summary.comparisons:
        for row in comp.speed:
            if row.verdict in UNSURE:
                where = (f"{row.metric} at {row.prompt_tokens} tokens"
                         + (f", {row.concurrency} at once" if row.concurrency > 1 else ""))
                out.setdefault((comp.baseline, comp.arm), []).append(f"{where}: {row.verdict}")
    for attribution in summary.factors.attribution if summary.factors else []:
        prop = attribution.property
        if prop.topic != "speed":
            continue
        for contrast in attribution.contrasts:
            if contrast.changed is False:
                where = (f"{prop.metric} at {prop.length} tokens"
                         + (f", {prop.level} at once" if (prop.level or 1) > 1 else ""))
                said = out.setdefault((contrast.without, contrast.with_factor), [])
                if f"{where}: within noise" not in said:
                    said.append(f"{where}: within noise")
    return out
