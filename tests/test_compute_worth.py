"""A loss difference's worth in compute: the baseline's curve read at the variant's loss, and an interval that carries
the seed noise of both arms, the baseline's curve included, at its nominal rate over simulated sweeps whose true
multiplier is known (numpy; the curve is straight in log FLOPs, so reading it between points is exact)."""

from __future__ import annotations

import numpy as np
import pytest

from gptlab.report.compute_worth import compute_worth, flops_at_loss
from gptlab.report.stats import compare, compare_paired

FLOPS = np.geomspace(1e9, 1e10, 12)  # the baseline's validation points
M = 0.6  # the true multiplier: the variant's curve is the baseline's at 0.6x the compute


def truth(flops):
    return 4.0 - 0.3 * np.log(np.asarray(flops) / 1e9)


def sweep(rng: np.random.Generator, n: int, paired: bool, level: float = 0.01, shape: float = 0.025,
          point: float = 0.003, shared: float = 0.8):
    """n seeds per arm: each baseline curve shifted (level), tilted (shape: a seed that learns faster early) and
    jittered per point; each variant's final shares `shared` of its level noise with the same seed's baseline when
    paired."""
    common = rng.normal(0, level * np.sqrt(shared), n) if paired else np.zeros(n)
    own = level * np.sqrt(1 - shared) if paired else level
    tilt = rng.normal(0, shape, n)[:, None] * np.log(FLOPS / FLOPS[-1])[None]
    curves = truth(FLOPS)[None] + (common + rng.normal(0, own, n))[:, None] + tilt + rng.normal(0, point, (n, 12))
    finals = truth(M * FLOPS[-1]) + common + rng.normal(0, own, n) + rng.normal(0, point, n)
    return curves, finals


def coverage(n: int, paired: bool, sweeps: int, rng: np.random.Generator) -> tuple[float, float]:
    """How often the interval covers M, and how often reading the mean curve at the ends of the loss difference's
    interval would (the curve's own noise left out)."""
    covered = read_at_ends = 0
    seeds = [str(i) for i in range(n)]
    for _ in range(sweeps):
        curves, finals = sweep(rng, n, paired)
        worth = compute_worth({s: (FLOPS, c) for s, c in zip(seeds, curves)}, dict(zip(seeds, finals)), FLOPS[-1],
                              paired)
        covered += worth.low is not None and worth.high is not None and worth.low <= M <= worth.high
        diff = (compare_paired if paired else compare)(curves[:, -1], finals)
        mean = curves.mean(axis=0)
        ends = [flops_at_loss(FLOPS, mean, mean[-1] + d) for d in (diff.ci_high, diff.ci_low)]
        read_at_ends += None not in ends and ends[0] / FLOPS[-1] <= M <= ends[1] / FLOPS[-1]
    return covered / sweeps, read_at_ends / sweeps


@pytest.mark.parametrize(("n", "paired", "sweeps"), [(5, True, 800), (4, False, 400)])
def test_the_interval_covers_the_true_multiplier_with_the_curves_noise_in_it(n, paired, sweeps) -> None:
    found, at_ends = coverage(n, paired, sweeps, np.random.default_rng(n))
    print(f"{'paired' if paired else 'unpaired'}, {n} seeds, {sweeps} sweeps: the jackknife interval covers m={M} in "
          f"{found:.3f}; the mean curve read at the ends of Δ's interval (its noise left out): {at_ends:.3f}")
    tolerance = 3 * np.sqrt(0.05 * 0.95 / sweeps)  # three binomial standard errors
    assert abs(found - 0.95) < tolerance
    if paired:  # pairing cancels the level noise, so the curve's tilt is most of what is left
        assert at_ends < 0.9


def test_compute_worth_reads_the_baseline_curve() -> None:
    flops, loss = [1e9, 2e9, 4e9, 8e9], [4.0, 3.5, 3.2, 3.0]
    assert flops_at_loss(flops, loss, 3.5) == pytest.approx(2e9)
    assert flops_at_loss(flops, loss, 3.35) == pytest.approx(np.sqrt(2e9 * 4e9))  # halfway in log FLOPs
    assert flops_at_loss(flops, loss, 2.9) is None and flops_at_loss(flops, loss, 4.1) is None
    curves = {"1": (flops, loss), "2": (flops, [v + 0.02 for v in loss])}
    worth = compute_worth(curves, {"1": 3.19, "2": 3.23}, 2e9, paired=True)  # 3.21 on the mean curve: 4e9 FLOPs
    assert worth.text() == "2x [1.39x, 2.89x]"  # each seed, on its own curve, reads off 4e9
    same = compute_worth(curves, {"1": 3.20, "2": 3.22}, 2e9, paired=True)  # each seed 4e9 on its own curve
    assert same.low == pytest.approx(2.0) and same.high == pytest.approx(2.0)
    assert compute_worth(curves, {"1": 2.9, "2": 2.95}, 8e9, paired=True).text() == "beyond the curve"
    one = compute_worth({"1": (flops, loss)}, {"1": 3.2}, 2e9, paired=True)
    assert one.text() == "2x (no interval)"  # one seed: no spread to build an interval from
    edge = compute_worth(curves, {"1": 3.0, "2": 3.04}, 1e9, paired=True)  # near the curve's end: its top is beyond
    assert edge.text() == "7.73x [4.97x, beyond]"
    off = compute_worth(curves, {"1": 2.99, "2": 3.05}, 1e9, paired=True)  # seed 1 alone reads past the end
    assert off.text() == "7.73x (interval beyond the curve)"
