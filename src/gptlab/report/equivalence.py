"""`--margin m`: whether "no difference found" means "no effect worth having", by two one-sided tests (TOST,
Schuirmann 1987). The variant is equivalent to the baseline within ±m when both "diff ≤ −m" and "diff ≥ m" are
rejected at alpha, which is the (1 − 2·alpha) interval lying inside (−m, m); not equivalent when the two-sided
(1 − alpha) interval lies wholly beyond one margin; otherwise undecided, with the seeds per arm that would decide
it with 80% power if the true difference were the one observed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from gptlab.report.power import MAX_SEEDS, POWER, finite, seeds_needed
from gptlab.report.stats import MIN_SEEDS, Comparison

EQUIVALENT, NOT_EQUIVALENT, UNDECIDED = "equivalent", "not equivalent", "undecided"


@dataclass(frozen=True)
class Equivalence:
    verdict: str
    margin: float
    p: float  # TOST's p: the larger of the two one-sided p-values
    seeds: int | None = None  # undecided: seeds per arm to decide (None: more than MAX_SEEDS, or unknown)

    def text(self) -> str:
        m = f"±{self.margin:g}"
        if self.verdict == EQUIVALENT:
            return f"equivalent within {m} (TOST p={self.p:.3g})"
        if self.verdict == NOT_EQUIVALENT:
            return f"not equivalent: beyond {m}"
        need = (f"{max(self.seeds, MIN_SEEDS):,} seeds per arm to decide" if self.seeds else
                f"more than {MAX_SEEDS:,} seeds to decide")  # never fewer than the report's own MIN_SEEDS
        return f"undecided within {m} (TOST p={self.p:.3g}; {need})"


def tost_p(diff: float, se: float, dof: float, margin: float) -> float:
    """The larger of the one-sided p-values of "diff ≤ −margin" and "diff ≥ margin"."""
    lower = stats.t.sf((diff + margin) / se, dof)
    upper = stats.t.cdf((diff - margin) / se, dof)
    return float(max(lower, upper))


def tost_power(diff: float, sigma: float, n: int, margin: float, alpha: float = 0.05, paired: bool = True) -> float:
    """Chance that TOST with n seeds per arm declares equivalence when the true difference is `diff` (the
    noncentral-t form that treats the two one-sided tests as sharing their sigma estimate; Owen 1965 is exact)."""
    dof, se = (n - 1, sigma / math.sqrt(n)) if paired else (2 * n - 2, sigma * math.sqrt(2 / n))
    if dof < 1 or abs(diff) >= margin:
        return 0.0
    crit = stats.t.ppf(1 - alpha, dof)
    low, high = (diff + margin) / se, (diff - margin) / se
    both = (finite(stats.nct.sf(crit, dof, low), stats.norm.sf(crit - low))
            + finite(stats.nct.cdf(-crit, dof, high), stats.norm.cdf(-crit - high)) - 1)
    return max(0.0, float(both))


def tost_seeds(diff: float, sigma: float, margin: float, alpha: float = 0.05, paired: bool = True) -> int | None:
    """Fewest seeds per arm (≥ 2, ≤ MAX_SEEDS) with TOST power ≥ 80% at true difference `diff`; when |diff| is at
    or beyond the margin, the seeds that show it lies beyond (a two-sided test of the excess)."""
    if abs(diff) >= margin:
        return seeds_needed(abs(diff) - margin, sigma, alpha, paired)
    high = 2  # doubled past the target, then bisected: TOST's power grows with n, so this is the smallest n
    while tost_power(diff, sigma, high, margin, alpha, paired) < POWER:
        if high >= MAX_SEEDS:
            return None
        high = min(2 * high, MAX_SEEDS)
    low = max(2, high // 2)
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if tost_power(diff, sigma, mid, margin, alpha, paired) < POWER else (low, mid)
    return high


def equivalence(comp: Comparison, margin: float, sigma: float | None) -> Equivalence | None:
    """The TOST verdict of a tested comparison; `sigma` (a paired comparison's spread of differences, else one
    arm's spread) sizes the seeds an undecided one needs. None when the comparison has no test."""
    if not comp.testable or comp.se is None:
        return None
    p = tost_p(comp.diff, comp.se, comp.dof, margin)
    if p < comp.alpha:
        return Equivalence(EQUIVALENT, margin, p)
    if comp.ci_low > margin or comp.ci_high < -margin:
        return Equivalence(NOT_EQUIVALENT, margin, p)
    seeds = tost_seeds(comp.diff, sigma, margin, comp.alpha, comp.paired) if sigma else None
    return Equivalence(UNDECIDED, margin, p, seeds)
