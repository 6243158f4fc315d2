"""gptlab.report.ladder_fit: the power-law fit, the compute multiplier and its bootstrap interval, on synthetic
ladders drawn from a known law."""

from __future__ import annotations

import numpy as np
import pytest

from gptlab.report.ladder_fit import (
    PowerLaw,
    Rung,
    bootstrap_band,
    bootstrap_multipliers,
    far_extrapolation,
    fit_power_law,
    fit_rungs,
    multiplier,
)

COMPUTE = [1e12, 3e12, 1e13, 3e13, 1e14]
TRUTH = PowerLaw(e=1.8, a=2.0, alpha=0.35, c_ref=1e12)


def ladder(law: PowerLaw, noise: float, seeds: int = 5, rng_seed: int = 0) -> list[Rung]:
    rng = np.random.default_rng(rng_seed)
    return [Rung(f"s{i}", c, {str(s): float(law.loss(c)) + noise * rng.standard_normal() for s in range(seeds)})
            for i, c in enumerate(COMPUTE)]


def test_fit_recovers_a_known_power_law() -> None:
    fit = fit_power_law(COMPUTE, [float(TRUTH.loss(c)) for c in COMPUTE])
    assert fit.e == pytest.approx(1.8, rel=1e-4) and fit.a == pytest.approx(2.0, rel=1e-4)
    assert fit.alpha == pytest.approx(0.35, rel=1e-4)
    assert fit.compute_for(float(TRUTH.loss(5e13))) == pytest.approx(5e13, rel=1e-4)
    assert fit.compute_for(1.7) == float("inf")  # below the floor E: never reached
    with pytest.raises(ValueError, match="at least 3 distinct compute"):
        fit_power_law([1e12, 1e12, 2e12], [3.0, 3.0, 2.9])


def test_multiplier_and_its_interval_recover_the_truth() -> None:
    m_true = 2.0  # the variant reaches at C what the baseline reaches at 2C
    variant = PowerLaw(TRUTH.e, TRUTH.a * m_true ** -TRUTH.alpha, TRUTH.alpha, TRUTH.c_ref)
    assert multiplier(TRUTH, variant, 3e13) == pytest.approx(m_true)
    target = 10 * COMPUTE[-1]
    at = [*COMPUTE, target]
    intervals = bootstrap_multipliers(ladder(TRUTH, 0.004, rng_seed=1), ladder(variant, 0.004, rng_seed=2), at,
                                      n_boot=200)
    for c, iv in zip(at, intervals):
        assert iv.low <= m_true <= iv.high, (c, iv)
        assert 1.5 < iv.point < 2.6 and iv.low < iv.point < iv.high
    assert intervals[-1].high - intervals[-1].low > intervals[2].high - intervals[2].low  # wider far out
    same = bootstrap_multipliers(ladder(TRUTH, 0.004, rng_seed=1), ladder(TRUTH, 0.004, rng_seed=3), at, n_boot=200)
    assert all(iv.low <= 1.0 <= iv.high for iv in same)  # no difference: the interval holds 1


def test_extrapolation_beyond_10x_the_largest_rung_is_flagged() -> None:
    assert far_extrapolation(10 * COMPUTE[-1], COMPUTE[-1]) is None
    note = far_extrapolation(30 * COMPUTE[-1], COMPUTE[-1])
    assert note.startswith("EXTRAPOLATED 30x beyond the largest rung")


def test_band_contains_the_fit() -> None:
    rungs = ladder(TRUTH, 0.004)
    low, high = bootstrap_band(rungs, COMPUTE, n_boot=100)
    mid = fit_rungs(rungs).loss(np.asarray(COMPUTE))
    assert np.all(low <= mid + 1e-9) and np.all(mid <= high + 1e-9) and np.all(high - low > 0)
