"""A scaling ladder's statistics: L(C) = E + A·C^(−α) fitted per variant (scipy's curve_fit), the compute
multiplier of a variant against a baseline, and its bootstrap interval over seeds.

Compute multiplier (shared/DESIGN.md): at compute C, m(C) = C_b / C where L_b(C_b) = L_v(C): the compute the
baseline needs to reach the variant's loss, over the variant's. m > 1: the variant is worth m× compute. Pure
functions of per-size seed losses, so tests check them against a known power law.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit

FAR = 10.0  # an extrapolation beyond this many times the largest rung's compute is marked, not evidence


@dataclass(frozen=True)
class Rung:
    """One size of one variant: its training compute (FLOPs) and final val losses, one per seed."""

    size: str
    compute: float
    losses: dict[str, float]  # seed -> final val loss

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.losses.values())))


@dataclass(frozen=True)
class PowerLaw:
    """L(C) = E + A·(C / c_ref)^(−α); c_ref (the smallest rung's compute) keeps A of order 1 for the fit."""

    e: float
    a: float
    alpha: float
    c_ref: float

    def loss(self, c: float | np.ndarray) -> float | np.ndarray:
        return self.e + self.a * (np.asarray(c, dtype=float) / self.c_ref) ** (-self.alpha)

    def compute_for(self, loss: float) -> float:
        """The compute at which this law reaches `loss`; inf when `loss` is at or below its floor E."""
        if loss <= self.e or self.a <= 0 or self.alpha <= 0:
            return math.inf
        return self.c_ref * ((loss - self.e) / self.a) ** (-1.0 / self.alpha)


def _law(x: np.ndarray, e: float, a: float, alpha: float) -> np.ndarray:
    return e + a * x ** (-alpha)


def fit_power_law(compute: Sequence[float], loss: Sequence[float]) -> PowerLaw:
    """Least squares in loss, with bounds that keep the law meaningful: 0 ≤ E < min(loss) (an irreducible loss
    below every point), A ≥ 0, 0 < α ≤ 3. Starts from E = ½·min(loss), α = 0.3 (Chinchilla-like exponents)."""
    c, y = np.asarray(compute, dtype=float), np.asarray(loss, dtype=float)
    if len(c) < 3 or len(set(c.tolist())) < 3:
        raise ValueError(f"a 3-parameter law needs at least 3 distinct compute values, got {sorted(set(c.tolist()))}")
    c_ref = float(c.min())
    x = c / c_ref
    floor = float(y.min())
    e0, alpha0 = 0.5 * floor, 0.3
    a0 = max(float(y.max()) - e0, 1e-6)
    (e, a, alpha), _ = curve_fit(_law, x, y, p0=(e0, a0, alpha0),
                                 bounds=([0.0, 0.0, 1e-4], [floor * (1 - 1e-9), np.inf, 3.0]), maxfev=20000)
    return PowerLaw(float(e), float(a), float(alpha), c_ref)


def fit_rungs(rungs: Sequence[Rung]) -> PowerLaw:
    """The law through each rung's mean over seeds."""
    return fit_power_law([r.compute for r in rungs], [r.mean for r in rungs])


def multiplier(baseline: PowerLaw, variant: PowerLaw, c: float) -> float:
    """m(C) = C_b / C with L_b(C_b) = L_v(C); inf when the variant's loss lies below the baseline's floor E_b."""
    return baseline.compute_for(float(variant.loss(c))) / c


def far_extrapolation(target: float, largest: float) -> str | None:
    """A warning when `target` is more than FAR× the largest rung's compute, else None."""
    ratio = target / largest
    if ratio <= FAR:
        return None
    return (f"EXTRAPOLATED {ratio:.3g}x beyond the largest rung (more than {FAR:g}x): the ladder does not support it; "
            f"run bigger rungs instead of reading this number")


@dataclass(frozen=True)
class Interval:
    point: float
    low: float
    high: float
    failed: int  # bootstrap samples whose fit failed (left out); an infinite m stays in, as a large value


def _resample(rungs: Sequence[Rung], rng: np.random.Generator) -> list[Rung]:
    out = []
    for r in rungs:
        values = np.array(list(r.losses.values()))
        pick = values[rng.integers(0, len(values), len(values))]
        out.append(Rung(r.size, r.compute, {str(i): float(v) for i, v in enumerate(pick)}))
    return out


def bootstrap_multipliers(baseline: Sequence[Rung], variant: Sequence[Rung], at: Sequence[float],
                          n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> list[Interval]:
    """m at each compute in `at`, with a percentile interval from resampling each rung's seeds with replacement
    (both variants independently), refitting both laws and recomputing m."""
    base_law, var_law = fit_rungs(baseline), fit_rungs(variant)
    points = [multiplier(base_law, var_law, c) for c in at]
    rng = np.random.default_rng(seed)
    samples = np.full((n_boot, len(at)), np.nan)
    for i in range(n_boot):
        try:
            b, v = fit_rungs(_resample(baseline, rng)), fit_rungs(_resample(variant, rng))
        except (RuntimeError, ValueError):  # curve_fit found no optimum for this resample
            continue
        samples[i] = [multiplier(b, v, c) for c in at]
    tail = (1 - level) / 2 * 100
    out = []
    for j, point in enumerate(points):
        column = samples[:, j]
        good = column[~np.isnan(column)]
        # inverted_cdf picks sample values, no interpolation: an infinite m (inf − inf) would turn into NaN
        low, high = (np.percentile(good, [tail, 100 - tail], method="inverted_cdf") if len(good)
                     else (math.nan, math.nan))
        out.append(Interval(point, float(low), float(high), n_boot - len(good)))
    return out


def bootstrap_band(rungs: Sequence[Rung], grid: Sequence[float], n_boot: int = 200, level: float = 0.95,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The fitted loss curve's percentile band over seed resamples, on `grid` (for the plot)."""
    rng = np.random.default_rng(seed)
    curves = []
    for _ in range(n_boot):
        try:
            curves.append(fit_rungs(_resample(rungs, rng)).loss(np.asarray(grid)))
        except (RuntimeError, ValueError):
            continue
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(np.array(curves), [tail, 100 - tail], axis=0)
    return low, high
