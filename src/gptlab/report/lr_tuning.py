"""An ablation at each variant's own best learning rate: LR-sensitivity curves, Wortsman et al.'s sensitivity,
best-LR selection on one set of seeds and the best-vs-best test on the others, and an edge-of-grid flag.

Comparing two variants at one shared LR measures the LR as much as the variant (Wortsman et al. 2023, "Small-scale
proxies for large-scale Transformer training instabilities"). Pure functions of `LrRun` records, so every number
the report prints is checked on plain data (tests/test_lr_tuning.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gptlab.report.stats import Comparison, Summary
from gptlab.report.verdicts import Sample, Spread, Verdict, judge_samples


@dataclass(frozen=True)
class LrRun:
    """One finished job: its variant, LR and seed, and its final val loss and bpb (None: diverged)."""

    variant: str
    lr: float
    seed: str
    loss: float | None
    bpb: float | None = None
    init: float | None = None  # the run's measured initial loss, its cap; None: the report's common cap
    stability: str = "stable"  # report.instability's kind: stable | unstable | diverged | unknown
    paired: bool = True  # launched with paired_seeds on: seed s shares data order and init with the other variants

    @property
    def diverged(self) -> bool:
        return self.loss is None or not math.isfinite(self.loss)


@dataclass(frozen=True)
class LrPoint:
    """A variant at one LR over the seeds given: loss and bpb of the runs that finished, and how many diverged."""

    lr: float
    loss: Summary | None
    bpb: Summary | None
    diverged: int
    unstable: int = 0  # runs that finished but whose loss rose above its initial loss or spiked


def capped(run: LrRun, cap: float) -> float:
    """min(loss, L0): a diverged run, or one worse than the untrained model, counts as the loss at init, L0 the
    run's own measured initial loss when it has one, else `cap`."""
    limit = cap if run.init is None else run.init
    return limit if run.diverged else min(run.loss, limit)


def lr_curve(runs: Sequence[LrRun]) -> list[LrPoint]:
    """One variant's runs as a curve over its LR grid, lowest LR first (the sensitivity plot and table)."""
    points = []
    for lr in sorted({r.lr for r in runs}):
        at = [r for r in runs if r.lr == lr]
        ok = [r for r in at if not r.diverged]
        points.append(LrPoint(lr, Summary.of([r.loss for r in ok]), Summary.of([r.bpb for r in ok]),
                              len(at) - len(ok), sum(r.stability == "unstable" for r in ok)))
    return points


def grid_losses(runs: Sequence[LrRun], cap: float) -> dict[float, float]:
    """Per LR, the mean over seeds of the capped final loss."""
    return {lr: float(np.mean([capped(r, cap) for r in runs if r.lr == lr])) for lr in sorted({r.lr for r in runs})}


def sensitivity(runs: Sequence[LrRun], cap: float) -> float:
    """Wortsman et al. 2023's LR sensitivity: E_lr[min(L(lr), L0) − min_lr L(lr)] over the grid, L(lr) the mean
    final loss over seeds and L0 the loss at initialization (the cap for diverged runs). 0 means every LR of the
    grid is as good as the best; lower is more robust. Comparable between variants only on the same grid."""
    losses = grid_losses(runs, cap)
    best = min(losses.values())
    return float(np.mean([v - best for v in losses.values()]))


@dataclass(frozen=True)
class SeedSplit:
    """Seeds the best LR is picked on, and seeds the best-vs-best test uses; `disjoint` False when they are the
    same seeds (too few for both), which makes the comparison optimistic (the winner's curse)."""

    select: tuple[str, ...]
    test: tuple[str, ...]

    @property
    def disjoint(self) -> bool:
        return not set(self.select) & set(self.test)


def split_seeds(seeds: Sequence[str]) -> SeedSplit:
    """The first ⌊n/2⌋ seeds (in sorted order) select, the rest (≥ 2, enough for a t-test) test; with fewer
    than 3 seeds both use all of them."""
    ordered = tuple(sorted(set(seeds), key=lambda s: (len(s), s)))  # 2 before 10
    if len(ordered) < 3:
        return SeedSplit(ordered, ordered)
    k = len(ordered) // 2
    return SeedSplit(ordered[:k], ordered[k:])


@dataclass(frozen=True)
class BestLr:
    lr: float
    loss: float  # mean capped loss on the selection seeds
    edge: str | None  # "lowest" / "highest" when the best is the grid's end: the optimum is not bracketed
    grid: tuple[float, ...]

    @property
    def widen(self) -> str | None:
        """What to do about an edge optimum, or None."""
        if self.edge is None:
            return None
        side = "lower" if self.edge == "lowest" else "higher"
        return f"best LR {self.lr:g} is the {self.edge} of the grid: widen the grid toward {side} LRs"


def best_lr(runs: Sequence[LrRun], seeds: Sequence[str], cap: float) -> BestLr:
    """The LR with the lowest mean capped loss on `seeds`; a tie goes to the lower LR (the safer one)."""
    chosen = [r for r in runs if r.seed in set(seeds)]
    if not chosen:
        raise ValueError(f"no run of variant {runs[0].variant if runs else '?'} has a seed in {list(seeds)}")
    losses = grid_losses(chosen, cap)
    grid = tuple(sorted({r.lr for r in runs}))
    lr = min(losses, key=lambda k: (losses[k], k))
    edge = None if len(grid) < 2 else "lowest" if lr == grid[0] else "highest" if lr == grid[-1] else None
    return BestLr(lr, losses[lr], edge, grid)


GRID_EDGE = "optimum at grid edge: widen the grid"  # why two variants get no p-value


@dataclass(frozen=True)
class TunedResult:
    """A variant at its own best LR, tested against the baseline at the baseline's best LR on `split.test`."""

    variant: str
    best: BestLr
    sensitivity: float
    test_losses: dict[str, float]  # seed -> capped final loss at the best LR, on the test seeds
    verdict: Verdict | None  # None for the baseline itself

    @property
    def comparison(self) -> Comparison | None:
        return self.verdict and self.verdict.comparison


def tuned_comparison(runs: Sequence[LrRun], baseline: str, cap: float, alpha: float = 0.05, test: str = "paired",
                     correction: str = "holm", margin: float | None = None
                     ) -> tuple[SeedSplit, list[TunedResult], Spread]:
    """Every variant (in order of first appearance) at its best LR on the selection seeds, against the baseline's
    best on the test seeds, by the ablation report's verdicts (report.verdicts: paired by seed where the seeds pair,
    Holm over the variants, equivalence within a margin); and the spread of the test seeds' losses."""
    split = split_seeds([r.seed for r in runs])
    variants = list(dict.fromkeys(r.variant for r in runs))
    if baseline not in variants:
        raise ValueError(f"baseline {baseline!r} is not one of the variants {variants}")
    bests, sens, samples = [], [], []
    for v in variants:
        mine = [r for r in runs if r.variant == v]
        best = best_lr(mine, split.select, cap)
        tested = [r for r in mine if r.lr == best.lr and r.seed in set(split.test)]
        bests.append(best)
        sens.append(sensitivity(mine, cap))
        samples.append(Sample({r.seed: capped(r, cap) for r in tested}, all(r.paired for r in tested)))
    base = variants.index(baseline)
    untested = {i: Comparison(float(np.mean(list(s.values.values())) - np.mean(list(samples[base].values.values()))),
                              alpha=alpha, no_test=GRID_EDGE)  # an unbracketed optimum: its true best is unknown
                for i, s in enumerate(samples) if i != base and s.values and (bests[i].edge or bests[base].edge)}
    judged, spread = judge_samples(variants, samples, base, alpha, test, correction, margin, untested)
    return split, [TunedResult(v, b, se, s.values, j)
                   for v, b, se, s, j in zip(variants, bests, sens, samples, judged)], spread
