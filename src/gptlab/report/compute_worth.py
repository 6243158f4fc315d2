"""What a loss difference is worth in training compute at the sweep's scale: the baseline's own mean val/loss curve
against training FLOPs, read at the variant's final loss. m = C_b / C_v, where the baseline reached the variant's
loss after C_b FLOPs and the variant spent C_v: m > 1, the variant saves compute (1.3x: the baseline needs 30% more
to match it). The curve is read between its validation points, loss linear in log FLOPs, after a running minimum
(a noisy uptick must not give one loss two costs); a loss the curve never reached, or above its first point, is
"beyond the curve": no extrapolation.

The interval carries the seed noise of both arms: of the variant's final loss and of the baseline's curve itself
(its level and its shape), by the jackknife over seeds (Quenouille–Tukey): log m is recomputed with each seed left
out (paired seeds: out of both arms at once, so the noise they share stays shared; independent arms: out of each
arm in turn), and log m ± t·se with Student's t at the jackknife's dof (n − 1 paired, Welch–Satterthwaite over the
two arms' parts otherwise), the same t the loss difference's interval uses. Not the percentile bootstrap: at the 3-5
seeds ablations run its resamples cannot leave the range of the seeds' values and its intervals run short of their
nominal level (docs/ablations.md gives both coverages). An end whose C_b lies outside the FLOPs the baseline's
curve spans reads "beyond".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from gptlab.report.stats import common_grid, welch_dof

BEYOND = "beyond the curve"


def flops_at_loss(flops: Sequence[float], loss: Sequence[float], target: float) -> float | None:
    """The FLOPs at which the curve first reached `target`; None outside the losses it spans."""
    x, y = np.asarray(flops, dtype=float), np.minimum.accumulate(np.asarray(loss, dtype=float))
    if len(x) < 2 or target < y[-1] or target > y[0]:
        return None
    i = int(np.argmax(y <= target))  # first point at or below the target
    if i == 0:
        return float(x[0])
    lo, hi = y[i - 1], y[i]
    frac = (lo - target) / (lo - hi)
    return float(np.exp(np.log(x[i - 1]) + frac * (np.log(x[i]) - np.log(x[i - 1]))))


@dataclass(frozen=True)
class Worth:
    multiplier: float | None  # None: beyond the curve
    low: float | None  # None: beyond the curve
    high: float | None
    has_interval: bool = True  # False: fewer than 2 seeds in an arm, so no spread to build one from

    def text(self) -> str:
        def one(m: float | None) -> str:
            return "beyond" if m is None else f"{m:.3g}x"

        if self.multiplier is None:
            return BEYOND
        if not self.has_interval:
            return f"{one(self.multiplier)} (no interval)"
        if self.low is None and self.high is None:
            return f"{one(self.multiplier)} (interval {BEYOND})"
        return f"{one(self.multiplier)} [{one(self.low)}, {one(self.high)}]"


Curves = dict[str, tuple[Sequence[float], Sequence[float]]]  # seed -> (training FLOPs, val/loss) of one run


def _log_m(grid: np.ndarray, curve: np.ndarray, loss: float, variant_flops: float) -> float | None:
    found = flops_at_loss(grid, curve, loss)
    return None if found is None else float(np.log(found / variant_flops))


def compute_worth(base_curves: Curves, variant_finals: dict[str, float], variant_flops: float, paired: bool,
                  alpha: float = 0.05) -> Worth | None:
    """m at the variant's mean final loss on the baseline's mean curve, with its (1 − alpha) jackknife interval over
    both arms' seeds (paired: the seeds both arms ran, left out together). None without a common curve."""
    seeds = sorted(base_curves, key=lambda s: (len(s), s))
    found = common_grid([base_curves[s] for s in seeds])
    if found is None or not variant_finals:
        return None
    grid, ys = found
    finals = np.array([variant_finals[s] for s in (seeds if paired else variant_finals)], dtype=float)
    point = _log_m(grid, ys.mean(axis=0), float(finals.mean()), variant_flops)
    if point is None:
        return Worth(None, None, None)
    n_b, n_v = len(ys), len(finals)
    if min(n_b, n_v) < 2:
        return Worth(float(np.exp(point)), None, None, has_interval=False)
    total, final_sum = ys.sum(axis=0), finals.sum()
    if paired:  # seed i out of both arms
        parts = [[_log_m(grid, (total - ys[i]) / (n_b - 1), (final_sum - finals[i]) / (n_v - 1), variant_flops)
                  for i in range(n_b)]]
    else:  # a seed out of the baseline (its curve), then a seed out of the variant (its final)
        parts = [[_log_m(grid, (total - ys[i]) / (n_b - 1), float(finals.mean()), variant_flops) for i in range(n_b)],
                 [_log_m(grid, ys.mean(axis=0), (final_sum - finals[j]) / (n_v - 1), variant_flops)
                  for j in range(n_v)]]
    if any(v is None for part in parts for v in part):  # a seed's absence moves the reading off the curve
        return Worth(float(np.exp(point)), None, None)
    variances = [(len(p) - 1) / len(p) * float(np.sum((np.array(p) - np.mean(p)) ** 2)) for p in parts]
    se = float(np.sqrt(sum(variances)))
    dof = n_b - 1 if paired else (welch_dof(variances[0] * n_b, n_b, variances[1] * n_v, n_v)
                                  if sum(variances) > 0 else float(min(n_b, n_v) - 1))
    half = float(stats.t.ppf(1 - alpha / 2, dof)) * se

    def end(log_m: float) -> float | None:  # inside the FLOPs the baseline's curve spans, else beyond
        c_b = np.exp(log_m) * variant_flops
        return float(np.exp(log_m)) if grid[0] <= c_b <= grid[-1] else None

    return Worth(float(np.exp(point)), end(point - half), end(point + half))
