"""How many seeds a question needs: the sweep's seed sigma with its interval, the smallest effect its seeds can
detect, and the seeds per arm an effect needs, for the paired test and for Welch's.

Power is the t-test's exact power from the noncentral t distribution (Student's t with the planned seeds'
degrees of freedom), not the normal approximation, which overstates it at the few seeds ablations run: a paired
test of n seeds has n − 1 dof with sigma the spread of the per-seed differences; two independent arms of n seeds
have 2n − 2 dof with sigma each arm's spread, so their difference has sigma·sqrt(2/n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

POWER = 0.8
MAX_SEEDS = 100_000  # beyond this the answer is "no affordable sweep"


@dataclass(frozen=True)
class Sigma:
    """A standard deviation pooled over groups, with its (1 − alpha) chi-square interval."""

    value: float
    low: float
    high: float
    dof: int


def pooled_sigma(groups: Sequence[Sequence[float]], alpha: float = 0.05) -> Sigma | None:
    """sqrt(Σ (n_i − 1) s_i² / Σ (n_i − 1)) over groups of ≥ 2 values: each arm's seeds spread about its own mean,
    so arms with different means share one sigma. None when no group has two values."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g) > 1]
    dof = sum(len(g) - 1 for g in groups)
    if not dof:
        return None
    var = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / dof
    low = math.sqrt(dof * var / stats.chi2.ppf(1 - alpha / 2, dof))
    high = math.sqrt(dof * var / stats.chi2.ppf(alpha / 2, dof))
    return Sigma(math.sqrt(var), low, high, dof)


def power(effect: float, sigma: float, n: int, alpha: float = 0.05, paired: bool = True) -> float:
    """Chance that a two-sided t-test at `alpha` with n seeds per arm finds a true difference `effect`."""
    dof, se = (n - 1, sigma / math.sqrt(n)) if paired else (2 * n - 2, sigma * math.sqrt(2 / n))
    if dof < 1:
        return 0.0
    crit, shift = stats.t.ppf(1 - alpha / 2, dof), abs(effect) / se
    return float(finite(stats.nct.sf(crit, dof, shift), stats.norm.sf(crit - shift))
                 + finite(stats.nct.cdf(-crit, dof, shift), 0.0))


def finite(value: float, fallback: float) -> float:
    """scipy's noncentral t returns NaN at some points of its far tails (scipy 1.17, 1 dof, shift 15): there the
    wrong-sign tail is ~0 and the right one its normal approximation."""
    return float(value) if np.isfinite(value) else fallback


def seeds_needed(effect: float, sigma: float, alpha: float = 0.05, paired: bool = True,
                 target: float = POWER) -> int | None:
    """The fewest seeds per arm (≥ 2) whose test finds `effect` with chance `target`; None past MAX_SEEDS."""
    if sigma == 0:
        return 2
    if effect == 0:
        return None
    high = 2
    while power(effect, sigma, high, alpha, paired) < target:
        if high >= MAX_SEEDS:
            return None
        high = min(2 * high, MAX_SEEDS)
    low = max(2, high // 2)
    while low < high:  # power grows with n: the first n that reaches the target
        mid = (low + high) // 2
        low, high = (mid + 1, high) if power(effect, sigma, mid, alpha, paired) < target else (low, mid)
    return high


def detectable_effect(sigma: float, n: int, alpha: float = 0.05, paired: bool = True,
                      target: float = POWER) -> float | None:
    """The smallest true difference n seeds per arm find with chance `target`; None with fewer than 2 seeds."""
    if n < 2 or sigma <= 0:
        return None
    high = sigma
    while power(high, sigma, n, alpha, paired) < target:
        high *= 2
    return float(optimize.brentq(lambda e: power(e, sigma, n, alpha, paired) - target, 0.0, high, xtol=sigma * 1e-6))
