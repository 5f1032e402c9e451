"""Main effects of a two-level design on a measured quantity (speed, start-up), with 95 %
intervals from the loads.

A factor's main effect is the mean over the arms with it minus the mean over the arms
without it, each arm weighted alike (the design's balance, not its load counts). Its
interval comes from the spread between loads within each arm, pooled over the arms: an
arm's loads are its replicates, since loads differ more than the requests within one.
With s^2 the pooled variance on df = sum(n_i - 1) degrees of freedom, the effect's
variance is s^2 (sum_+ 1/n_i / k_+^2 + sum_- 1/n_i / k_-^2), and the band is Student's t
at 97.5 % on df. No band without a spread to pool (every arm one load); no estimate for a
factor present in every measured arm or in none. In a fraction the estimate is that of
the whole alias group the factor sits in, and the finding names the group.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import scipy.stats as sps

from servediff.analysis.findings import EffectEstimate
from servediff.analysis.stats import stable


def main_effects(what: str, factors: Sequence[str], arms: Mapping[str, Sequence[str]],
                 samples: Mapping[str, Sequence[float]],
                 aliases: Mapping[str, list[str]] | None = None) -> list[EffectEstimate]:
    """Each factor's main effect on `what`, from the samples (one per load) of each arm;
    arms without samples are left out."""
    measured = {a: list(v) for a, v in samples.items() if v and a in arms}
    means = {a: statistics.fmean(v) for a, v in measured.items()}
    df = sum(len(v) - 1 for v in measured.values())
    pooled = (sum((x - means[a]) ** 2 for a, v in measured.items() for x in v) / df
              if df else None)
    out = []
    for factor in factors:
        plus = [a for a in measured if factor in arms[a]]
        minus = [a for a in measured if factor not in arms[a]]
        if not plus or not minus:
            continue
        effect = (statistics.fmean(means[a] for a in plus)
                  - statistics.fmean(means[a] for a in minus))
        band = None
        if pooled is not None:
            var = pooled * (sum(1 / len(measured[a]) for a in plus) / len(plus) ** 2
                            + sum(1 / len(measured[a]) for a in minus) / len(minus) ** 2)
            half = float(sps.t.ppf(0.975, df)) * var ** 0.5
            band = [stable(effect - half), stable(effect + half)]
        out.append(EffectEstimate(
            what=what, factor=factor, estimate=stable(effect), band95=band, df=df,
            arms=[len(plus), len(minus)], loads=[sum(len(measured[a]) for a in plus),
                                                 sum(len(measured[a]) for a in minus)],
            aliases=list((aliases or {}).get(factor, []))))
    return out
