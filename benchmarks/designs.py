"""Cold loads per design, and whether each design's arms recover a known answer.

    python benchmarks/designs.py [--max-factors 8] [--loads-per-arm 4]

For k = 2..8 factors and each design servediff makes (the full factorial, fractions
of resolution III, IV and V, Plackett-Burman screening), it prints the arms, the cold
loads (arms x loads per arm: 2 drift + 2 cost loads by default) and whether the
design's arms, read by analysis.screening as a run reads them, recover the answer the
fake engine's rule builds in (tests/engines/fake.py behaves so, by launch flags):

- drift across loads stops only with `f0` and `f1` together (an interaction);
- `f2` alone cuts the KV pool (a cost that fixes nothing);
- every other factor changes nothing.

A harder rule, in its own column: drift stops only with `f0`, `f1` and `f3` together
(k >= 4), a three-factor interaction that small fractions alias with others.

"recovered" means: the drift explanation is exactly {f0, f1}, the KV explanation
exactly {f2} (k >= 3), and the predicted set to ship is f0+f1. A design that cannot
tell sets apart says "cannot tell apart", which counts as not recovered but honest;
"wrong" would be a single confident wrong answer, and must never appear.
"""

from __future__ import annotations

import argparse

from servediff.analysis.screening import explain
from servediff.design import DesignSpec, make


def known(arm: list[str]) -> tuple[bool, bool, bool]:
    """(reproducible across loads, KV pool changed against the baseline, reproducible
    under the harder rule) of an arm."""
    return {"f0", "f1"} <= set(arm), "f2" in arm, {"f0", "f1", "f3"} <= set(arm)


DESIGNS = [("full", DesignSpec(kind="full")),
           ("fractional III", DesignSpec(kind="fractional", resolution=3)),
           ("fractional IV", DesignSpec(kind="fractional", resolution=4)),
           ("fractional V", DesignSpec(kind="fractional", resolution=5)),
           ("screening", DesignSpec(kind="screening"))]


def verdict(kind: str, sets: list[list[str]], truth: list[str]) -> str:
    if kind == "explained":
        return "recovered" if sets == [truth] else "WRONG"
    return kind


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-factors", type=int, default=8)
    parser.add_argument("--loads-per-arm", type=int, default=4)
    args = parser.parse_args()
    print(f"{'k':>2}  {'design':<15} {'arms':>5} {'loads':>6} {'of full':>8}  "
          f"{'res':>4}  {'drift (f0 x f1)':<18} {'KV (f2)':<18} {'drift (f0 x f1 x f3)'}")
    for k in range(2, args.max_factors + 1):
        factors = [f"f{i}" for i in range(k)]
        full = 2 ** k * args.loads_per_arm
        for name, spec in DESIGNS:
            try:
                design = make(factors, spec)
            except ValueError as e:
                print(f"{k:>2}  {name:<15} {'-':>5} {'-':>6} {'-':>8}  {'-':>4}  {e}")
                continue
            if spec.kind != "full" and design.full:
                continue  # the same arms as the full factorial
            arms = {"+".join(r) or "baseline": r for r in design.rows}
            drift = explain(factors, arms, {a: known(r)[0] for a, r in arms.items()})
            kv = (explain(factors, arms, {a: known(r)[1] for a, r in arms.items()})
                  if k >= 3 else ("-", []))
            hard = (explain(factors, arms, {a: known(r)[2] for a, r in arms.items()})
                    if k >= 4 else ("-", []))
            loads = len(design.rows) * args.loads_per_arm
            res = str(design.resolution or "-")
            print(f"{k:>2}  {name:<15} {len(design.rows):>5} {loads:>6} "
                  f"{loads / full:>8.0%}  {res:>4}  "
                  f"{verdict(drift[0], drift[1], ['f0', 'f1']):<18} "
                  f"{verdict(kv[0], kv[1], ['f2']) if k >= 3 else '-':<18} "
                  f"{verdict(hard[0], hard[1], ['f0', 'f1', 'f3']) if k >= 4 else '-'}")


if __name__ == "__main__":
    main()
