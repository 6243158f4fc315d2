"""Intervals over seeds for the LR-tuned report's figures: LR sensitivity, the mean excess over the sweep's best
loss, the best LR, and each variant's difference from the baseline in the first two (percentile bootstrap: each
variant's seeds resampled with replacement, a seed keeping its whole row of LRs).

Two sensitivities are given because Wortsman et al.'s measures each variant against its own best loss: a variant
better at every LR but flatter at the bottom can score as the more sensitive. The excess over the sweep's best
loss (min over every variant and LR) measures all variants against one reference, so a variant better at every LR
always scores lower; between two variants it is the difference of their mean capped loss over the grid.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gptlab.report.lr_tuning import LrRun, capped


@dataclass(frozen=True)
class Interval:
    value: float  # on all the seeds
    low: float
    high: float

    @property
    def spans_zero(self) -> bool:
        return self.low <= 0 <= self.high

    def text(self, spec: str = ".4f") -> str:
        return f"{format(self.value, spec)} [{format(self.low, spec)}, {format(self.high, spec)}]"


@dataclass(frozen=True)
class VariantIntervals:
    sensitivity: Interval
    excess: Interval  # mean over the grid of the capped loss minus the sweep's best
    best_lr: Interval  # the LR (on all seeds) and the range the resamples' best LRs cover
    d_sensitivity: Interval | None  # variant − baseline; None for the baseline
    d_excess: Interval | None


def loss_matrix(runs: Sequence[LrRun], cap: float) -> tuple[list[str], list[float], np.ndarray]:
    """Seeds × LRs of capped final losses (NaN where a seed has no run at that LR)."""
    seeds = sorted({r.seed for r in runs}, key=lambda s: (len(s), s))
    grid = sorted({r.lr for r in runs})
    m = np.full((len(seeds), len(grid)), np.nan)
    for r in runs:
        m[seeds.index(r.seed), grid.index(r.lr)] = capped(r, cap)
    return seeds, grid, m


def _stats(means: np.ndarray, reference: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of LR means: sensitivity, excess over `reference` and the index of the best LR."""
    best = np.nanmin(means, axis=-1)
    sens = np.nanmean(means - best[..., None], axis=-1)
    return sens, np.nanmean(means, axis=-1) - reference, np.nanargmin(means, axis=-1)


def _resampled_means(m: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """n_boot × LRs: the mean over a resample of the seeds (rows), per LR; rows with an LR no resampled seed has
    are dropped."""
    idx = rng.integers(0, len(m), size=(n_boot, len(m)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "mean of empty slice": the NaN the next line drops
        means = np.nanmean(m[idx], axis=1)
    return means[~np.isnan(means).any(axis=1)]


def _interval(value: float, samples: np.ndarray, level: float) -> Interval:
    tail = (1 - level) / 2 * 100
    return Interval(float(value), float(np.percentile(samples, tail)), float(np.percentile(samples, 100 - tail)))


def lr_intervals(runs: Sequence[LrRun], baseline: str, cap: float, n_boot: int = 1000, level: float = 0.95,
                 seed: int = 0) -> dict[str, VariantIntervals]:
    """Every variant's figures with their bootstrap intervals (seeded: the same report twice gives the same
    numbers)."""
    rng = np.random.default_rng(seed)
    variants = list(dict.fromkeys(r.variant for r in runs))
    mats = {v: loss_matrix([r for r in runs if r.variant == v], cap) for v in variants}
    point = {v: np.nanmean(m, axis=0) for v, (_, _, m) in mats.items()}
    reference = float(min(np.nanmin(p) for p in point.values()))
    boot = {v: _stats(_resampled_means(m, n_boot, rng)[:n_boot], reference) for v, (_, _, m) in mats.items()}
    out = {}
    for v in variants:
        grid = np.asarray(mats[v][1])
        sens, excess, best = _stats(point[v], reference)
        b_sens, b_excess, b_best = boot[v]
        logs = np.log10(grid[b_best])
        tail = (1 - level) / 2 * 100
        best_iv = Interval(float(grid[best]), float(10 ** np.percentile(logs, tail, method="lower")),
                           float(10 ** np.percentile(logs, 100 - tail, method="higher")))
        d_sens = d_excess = None
        if v != baseline:
            n = min(len(b_sens), len(boot[baseline][0]))
            base_sens, base_excess, _ = _stats(point[baseline], reference)
            d_sens = _interval(sens - base_sens, b_sens[:n] - boot[baseline][0][:n], level)
            d_excess = _interval(excess - base_excess, b_excess[:n] - boot[baseline][1][:n], level)
        out[v] = VariantIntervals(_interval(sens, b_sens, level), _interval(excess, b_excess, level), best_iv,
                                  d_sens, d_excess)
    return out
