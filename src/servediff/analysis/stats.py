"""Exact statistics for counts of moved texts and divergent responses.

Clopper-Pearson intervals for a rate seen as k of n; exact McNemar tests for
paired arm comparisons (texts that moved under one arm only); the smallest
per-text move rate a corpus of n texts would have caught; and one-sided Fisher
exact tests of whether a group of texts holds more of the moved ones than
chance. scipy does the arithmetic; it is imported on first use, so the CLI
starts without it.
"""

from __future__ import annotations


def stable(x: float) -> float:
    """A derived interval bound to 10 significant digits: scipy builds on different
    machines disagree in the last bits, and `rederive` elsewhere must print the same."""
    return float(f"{x:.10g}")


def exact_ci(k: int, n: int, level: float = 0.95) -> list[float] | None:
    """Clopper-Pearson interval for the rate behind k successes in n trials."""
    if n == 0:
        return None
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return [stable(ci.low), stable(ci.high)]


def detectable_rate(n: int, power: float = 0.95) -> float | None:
    """The per-text move rate that would show at least one moved text among n with
    probability `power`: below it, "0 moved" is weak evidence of no drift."""
    if n == 0:
        return None
    return stable(1.0 - (1.0 - power) ** (1.0 / n))


def mcnemar(a_only: int, b_only: int) -> float | None:
    """Exact two-sided McNemar p-value from the discordant counts; None if none."""
    if a_only + b_only == 0:
        return None
    from scipy.stats import binomtest

    return stable(binomtest(min(a_only, b_only), a_only + b_only, 0.5).pvalue)


def fisher_greater(in_moved: int, in_still: int, out_moved: int, out_still: int) -> float:
    """One-sided Fisher exact p-value that a group holds more of the moved texts than
    chance: the 2x2 table (in the group, outside it) x (moved, not)."""
    from scipy.stats import fisher_exact

    _, p = fisher_exact([[in_moved, in_still], [out_moved, out_still]], alternative="greater")
    return stable(float(p))
