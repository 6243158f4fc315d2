"""The ablation report's statistics: across-seed summaries, the comparison against a baseline (paired by seed, or
Welch's for independent arms), and mean curves.

Kept apart from file reading and plotting so each number the report prints can be checked on plain lists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Summary:
    """Mean and sample standard deviation (ddof=1; 0 for one value) of one metric over a variant's seeds."""

    n: int
    mean: float
    std: float

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Summary | None:
        """None when no seed has the value (e.g. an old run without bpb)."""
        present = [float(v) for v in values if v is not None]
        if not present:
            return None
        std = float(np.std(present, ddof=1)) if len(present) > 1 else 0.0
        return cls(len(present), float(np.mean(present)), std)


WELCH, PAIRED = "Welch", "paired t"
MIN_SEEDS = 3  # per arm; with 2, Welch's t has at most 2 degrees of freedom and finds only gaps far beyond the noise
ONE_SEED = "one seed in an arm (n=1), no spread to test against"


@dataclass(frozen=True)
class Comparison:
    """variant − baseline. `p` and the CI are None when there is no variance to test against: either side has one
    seed, or every seed gave the same value on both sides (`no_test` says which)."""

    diff: float
    ci_low: float | None = None
    ci_high: float | None = None
    dof: float | None = None
    p: float | None = None
    alpha: float = 0.05
    no_test: str = ONE_SEED
    seeds: tuple[int, int] = (0, 0)  # (baseline, variant); (0, 0): not counted (a comparison made elsewhere)
    test: str = WELCH
    se: float | None = None  # standard error of diff, what the power and equivalence figures start from
    correlation: float | None = None  # paired: Pearson's r between the arms over seeds
    family: int = 1  # how many variants were tested against the baseline together
    p_family: float | None = None  # Holm-adjusted p when family > 1 (report.family): what `significant` reads

    @property
    def paired(self) -> bool:
        return self.test == PAIRED

    @property
    def testable(self) -> bool:
        return self.p is not None

    @property
    def significant(self) -> bool:
        p = self.p if self.p_family is None else self.p_family
        return p is not None and p < self.alpha

    @property
    def low_power(self) -> bool:
        """Tested, but with fewer than MIN_SEEDS seeds in an arm: a real difference of this size can go unfound, so
        "no difference found" says little."""
        return self.testable and 0 < min(self.seeds) < MIN_SEEDS

    @property
    def power_note(self) -> str:
        """`little power: 2 seeds against the baseline's 3, fewer than 3 in an arm`, or empty."""
        if not self.low_power:
            return ""
        return (f"little power: {self.seeds[1]} seeds against the baseline's {self.seeds[0]}, fewer than {MIN_SEEDS} "
                "in an arm")

    @property
    def half_width(self) -> float | None:
        return None if self.ci_high is None else (self.ci_high - self.ci_low) / 2


IDENTICAL = ("the runs are identical (every seed gave bit for bit the baseline's value: the variant changed nothing "
             "these runs compute; check that its override reaches the model)")
ZERO_VARIANCE = "zero variance (every seed gave the same value on both sides: repeats of one run?)"


def welch_dof(var_a: float, n_a: int, var_b: float, n_b: int) -> float:
    """Welch–Satterthwaite degrees of freedom of the difference of two means with unequal variances."""
    sa, sb = var_a / n_a, var_b / n_b
    return (sa + sb) ** 2 / (sa**2 / (n_a - 1) + sb**2 / (n_b - 1))


def compare(baseline: Sequence[float], variant: Sequence[float], alpha: float = 0.05) -> Comparison:
    """Difference of means with its (1 − alpha) confidence interval (Welch–Satterthwaite dof, Student's t)
    and Welch's two-sided t-test p-value, the test that does not assume the variants share a variance."""
    a, b = np.asarray(baseline, dtype=float), np.asarray(variant, dtype=float)
    diff, seeds = float(b.mean() - a.mean()), (len(a), len(b))
    if len(a) < 2 or len(b) < 2:
        return Comparison(diff, alpha=alpha, seeds=seeds)
    var_a, var_b = float(a.var(ddof=1)), float(b.var(ddof=1))
    se = math.sqrt(var_a / len(a) + var_b / len(b))
    if se == 0.0:  # scipy's t is 0/0 here; a p of 0 would call a difference of repeated runs significant
        return Comparison(diff, alpha=alpha, no_test=ZERO_VARIANCE, seeds=seeds)
    dof = welch_dof(var_a, len(a), var_b, len(b))
    half = float(stats.t.ppf(1 - alpha / 2, dof)) * se
    p = float(2 * stats.t.sf(abs(diff) / se, dof))  # scipy's ttest_ind(equal_var=False), written out as in the CI
    return Comparison(diff, diff - half, diff + half, dof, p, alpha, seeds=seeds, se=se)


def compare_paired(baseline: Sequence[float], variant: Sequence[float], alpha: float = 0.05) -> Comparison:
    """The paired comparison of arms run under the same seeds (element i of each is seed i): the mean of the
    per-seed differences with its Student's t interval (n − 1 dof) and the paired two-sided t-test. What both arms
    share under one seed (data order, the weights they have in common) cancels in each difference."""
    a, b = np.asarray(baseline, dtype=float), np.asarray(variant, dtype=float)
    d, seeds = b - a, (len(a), len(b))
    if len(d) < 2:
        return Comparison(float(d.mean()), alpha=alpha, seeds=seeds, test=PAIRED)
    se = float(d.std(ddof=1)) / math.sqrt(len(d))
    r = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else None
    if se == 0.0:
        return Comparison(float(d.mean()), alpha=alpha, no_test=ZERO_VARIANCE, seeds=seeds, test=PAIRED,
                          correlation=r)
    mean, dof = float(d.mean()), len(d) - 1  # scipy's ttest_rel written out: drills call it 1000s of times
    half = float(stats.t.ppf(1 - alpha / 2, dof)) * se
    p = float(2 * stats.t.sf(abs(mean) / se, dof))
    return Comparison(mean, mean - half, mean + half, float(dof), p, alpha,
                      seeds=seeds, test=PAIRED, se=se, correlation=r)


def verdict(label: str, comparison: Comparison, digits: int = 3) -> str:
    """One line per variant, e.g. `post: +0.031 ± 0.012 (95% CI), p=0.004, significant`; an interval that spans 0
    says `no difference found`, so a reader does not take the sign of the difference as a ranking, and a test on
    fewer than MIN_SEEDS seeds in an arm says it has little power."""
    diff = f"{comparison.diff:+.{digits}f}"
    if comparison.no_test == IDENTICAL:
        return f"{label}: {diff}, {IDENTICAL}"
    if not comparison.testable:
        return f"{label}: {diff}, {comparison.no_test}: no test possible"
    level = f"{1 - comparison.alpha:.0%}"
    if comparison.significant:
        sig = "significant"
    elif comparison.p_family is not None and comparison.p < comparison.alpha:
        sig = f"no difference found after Holm over {comparison.family} variants"
    else:
        sig = "no difference found (the interval spans 0)"
    holm = f" (Holm {comparison.p_family:.3g})" if comparison.p_family is not None else ""
    power = f"; {comparison.power_note}" if comparison.low_power else ""
    return (f"{label}: {diff} ± {comparison.half_width:.{digits}f} ({level} CI, {test_name(comparison)}), "
            f"p={comparison.p:.3g}{holm}, {sig}{power}")


def test_name(comparison: Comparison) -> str:
    """`paired t, 8 seeds` or `Welch, 3 vs 2 seeds`: which test a verdict used, on how many runs."""
    base, mine = comparison.seeds
    return f"paired t, {mine} seeds" if comparison.paired else f"Welch, {mine} vs {base} seeds"


@dataclass(frozen=True)
class Band:
    """A variant's curve across seeds on one grid: the mean and what the plot shades (min–max or ±1 std)."""

    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n: int


def common_grid(curves: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[np.ndarray, np.ndarray] | None:
    """Seeds may be evaluated at different x (wall-clock seconds always are): each (x, y) curve interpolated onto the
    union of their x points within the range every curve covers, so no seed is extrapolated: (grid, one row per
    curve). None when there is no curve or the ranges do not overlap."""
    curves = [(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in curves if len(x)]
    if not curves:
        return None
    start, end = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    if start > end:
        return None
    grid = np.unique(np.concatenate([x for x, _ in curves]))
    grid = grid[(grid >= start) & (grid <= end)]
    return grid, np.stack([np.interp(grid, x, y) for x, y in curves])


def mean_curve(curves: Sequence[tuple[Sequence[float], Sequence[float]]], band: str = "minmax") -> Band | None:
    """The curves' mean on their common grid, with a band; None where common_grid has none."""
    found = common_grid(curves)
    if found is None:
        return None
    grid, ys = found
    mean = ys.mean(axis=0)
    if band == "std":
        spread = ys.std(axis=0, ddof=1) if len(ys) > 1 else np.zeros_like(mean)
        low, high = mean - spread, mean + spread
    else:
        low, high = ys.min(axis=0), ys.max(axis=0)
    return Band(grid, mean, low, high, len(ys))


def value_at(band: Band, x: float) -> float | None:
    """The mean curve read at `x` by linear interpolation; None outside the points it has (no extrapolation)."""
    if not len(band.x) or x < band.x[0] or x > band.x[-1]:
        return None
    return float(np.interp(x, band.x, band.mean))
