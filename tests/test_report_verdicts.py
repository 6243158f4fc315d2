"""Verdicts that need fewer seeds: the paired test's and Welch's intervals cover a known effect at their nominal
rate, equivalence (TOST) and Holm's family hold their error rates, the seeds-needed formula matches a simulation,
and the report says which test it used and why (synthetic sweeps with a known truth; numpy-vectorised)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from test_report_stats import make_job, make_sweep, verdict_line

from gptlab.report.equivalence import EQUIVALENT, equivalence, tost_seeds
from gptlab.report.family import holm
from gptlab.report.power import detectable_effect, pooled_sigma, power, seeds_needed
from gptlab.report.runs import write_report
from gptlab.report.stats import compare, compare_paired

SWEEPS = 2000
EFFECT, SIGMA, SHARED = 0.004, 0.0014, 0.9  # a true difference, the seed sigma, and the share of it both arms see


def simulated(n: int, rng: np.random.Generator, effect: float = EFFECT, sweeps: int = SWEEPS, shared: float = SHARED):
    """`sweeps` sweeps of n seeds per arm, (sweeps, n) each: a `shared` part of a seed's variance is common to both
    arms (its data order and initial weights), the rest each arm's own."""
    common = rng.normal(0, SIGMA * np.sqrt(shared), (sweeps, n))
    own = SIGMA * np.sqrt(1 - shared)
    base = 3.0 + common + rng.normal(0, own, (sweeps, n))
    return base, 3.0 + effect + common + rng.normal(0, own, (sweeps, n))


def coverage(n: int, paired: bool, rng: np.random.Generator) -> tuple[float, float]:
    base, variant = simulated(n, rng)
    comps = [(compare_paired if paired else compare)(a, b) for a, b in zip(base, variant)]
    covered = np.mean([c.ci_low <= EFFECT <= c.ci_high for c in comps])
    return float(covered), float(np.mean([c.ci_high - c.ci_low for c in comps]))


def test_paired_and_welch_intervals_cover_the_true_effect_at_95_percent() -> None:
    rng = np.random.default_rng(0)
    paired, paired_width = coverage(5, True, rng)
    welch, welch_width = coverage(5, False, rng)
    print(f"coverage over {SWEEPS} sweeps of 5 seeds: paired {paired:.3f} (width {paired_width:.5f}), "
          f"Welch {welch:.3f} (width {welch_width:.5f})")
    tolerance = 3 * np.sqrt(0.05 * 0.95 / SWEEPS)  # three binomial standard errors
    assert abs(paired - 0.95) < tolerance  # exact for the paired test
    assert welch > 0.95 - tolerance  # Welch ignores the shared noise: valid, and wider than it needs to be
    assert paired_width < 0.5 * welch_width  # 90% of the noise shared: the paired interval is ~1/3 as wide


def test_tost_calls_equivalence_at_the_margin_no_more_than_alpha_of_the_time() -> None:
    rng = np.random.default_rng(1)
    margin = EFFECT  # the true difference sits on the margin: "equivalent" would be a false claim
    calls = [equivalence(compare_paired(a, b), margin, None).verdict == EQUIVALENT for a, b in zip(*simulated(6, rng))]
    inside = [equivalence(compare_paired(a, b), 3 * margin, None).verdict == EQUIVALENT
              for a, b in zip(*simulated(6, rng))]
    rate, found = float(np.mean(calls)), float(np.mean(inside))
    print(f"TOST at the margin: equivalent in {rate:.3f} of {SWEEPS} sweeps (alpha 0.05); margin 3x: {found:.3f}")
    assert rate < 0.05 + 3 * np.sqrt(0.05 * 0.95 / SWEEPS)
    assert found > 0.5  # the test is not simply never "equivalent"


def test_holm_matches_a_hand_computation_and_holds_the_family_error() -> None:
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # 0.5 x2 = 1.0, then 0.9 raised to it
    rng = np.random.default_rng(2)
    base = rng.normal(3.0, SIGMA, (SWEEPS, 5))
    variants = rng.normal(3.0, SIGMA, (4, SWEEPS, 5))  # four variants, no effect anywhere
    p = stats.ttest_ind(variants, base[None], axis=2, equal_var=False).pvalue  # (4, SWEEPS)
    raw = float(np.mean((p < 0.05).any(axis=0)))
    corrected = float(np.mean([min(holm(col)) < 0.05 for col in p.T]))
    print(f"family-wise error, 4 null variants: uncorrected {raw:.3f}, Holm {corrected:.3f}")
    assert raw > 0.1 and corrected < 0.05 + 3 * np.sqrt(0.05 * 0.95 / SWEEPS)


@pytest.mark.parametrize("paired", [True, False])
def test_the_seeds_needed_reach_80_percent_power_in_a_simulation(paired: bool) -> None:
    shared, effect = (SHARED, 0.0008) if paired else (0.0, 0.002)  # unpaired: independent arms
    sigma = SIGMA * (np.sqrt(2 * (1 - shared)) if paired else 1)  # the spread the planned test sees
    n = seeds_needed(effect, sigma, paired=paired)
    rng = np.random.default_rng(3)
    rates, welch = [], 0.0
    for seeds in (n - 1, n):
        base, variant = simulated(seeds, rng, effect, sweeps=4000, shared=shared)
        test = stats.ttest_rel(variant, base, axis=1) if paired else stats.ttest_ind(variant, base, axis=1)
        rates.append(float(np.mean(test.pvalue < 0.05)))
        welch = float(np.mean(stats.ttest_ind(variant, base, axis=1, equal_var=False).pvalue < 0.05))
    formula = power(effect, sigma, n, paired=paired)
    print(f"{'paired' if paired else 'unpaired'}: {n} seeds needed for {effect}; simulated power {rates[0]:.3f} at "
          f"{n - 1}, {rates[1]:.3f} at {n} (Welch {welch:.3f}); formula {formula:.3f}")
    assert rates[1] == pytest.approx(formula, abs=0.025)  # 4000 sweeps: one standard error is ~0.006
    assert rates[0] < 0.8 + 0.02 and rates[1] > 0.8 - 0.02
    if paired:  # the same runs read as independent arms: the shared noise swamps the effect
        assert welch < 0.5 * rates[1]
    else:  # Welch, which the report runs on unpaired arms, loses little to Student's t at these seeds
        assert welch > rates[1] - 0.05
    assert detectable_effect(sigma, n, paired=paired) <= effect < detectable_effect(sigma, n - 1, paired=paired)


def test_pooled_sigma_and_its_interval() -> None:
    s = pooled_sigma([[1.0, 2.0, 3.0], [10.0, 12.0]])  # squares 2 + 2 over 3 dof
    assert s.value == pytest.approx(np.sqrt(4 / 3)) and s.dof == 3 and s.low < s.value < s.high
    assert pooled_sigma([[1.0], [2.0]]) is None


def test_tost_seeds_size_an_undecided_equivalence() -> None:
    assert tost_seeds(0.0, SIGMA, 0.002, paired=False) > tost_seeds(0.0, SIGMA, 0.002) > 2
    rng = np.random.default_rng(4)
    sigma_d = SIGMA * np.sqrt(2 * (1 - SHARED))
    n_d = tost_seeds(0.0, sigma_d, 0.002)
    base, variant = simulated(n_d, rng, effect=0.0, sweeps=1000)
    rate = np.mean([equivalence(compare_paired(a, b), 0.002, sigma_d).verdict == EQUIVALENT
                    for a, b in zip(base, variant)])
    assert rate > 0.75  # the planned seeds decide it about 80% of the time


def seeded_sweep(tmp_path, finals: dict[str, list[float]], seeds: dict[str, list[int]] | None = None, **kwargs):
    sweep, index = tmp_path / "sweep", 0
    for value, per_seed in finals.items():
        for seed, final in zip((seeds or {}).get(value, range(1, len(per_seed) + 1)), per_seed):
            make_job(sweep, index, {"model.pos_emb": value, "seed": str(seed)}, [final + 0.5, final], **kwargs)
            index += 1
    return sweep


BASE = [3.00, 3.05, 2.97, 3.02, 2.99]


def test_the_report_pairs_seeds_and_says_why_and_falls_back_to_welch(tmp_path) -> None:
    shifted = [b + 0.01 + e for b, e in zip(BASE, [0.001, -0.002, 0.0, 0.002, -0.001])]
    text = write_report(seeded_sweep(tmp_path / "a", {"learned": BASE, "rope": shifted}))[0].read_text()
    line = verdict_line(text, "model.pos_emb=rope")
    assert "(95% CI, paired t, 5 seeds)" in line and line.endswith(", significant")
    assert "- model.pos_emb=rope (test): paired: both arms ran seeds 1,2,3,4,5 with paired seeds" in text
    assert "Per-seed correlation with the baseline: model.pos_emb=rope r=+1.00" in text
    welch = verdict_line(write_report(tmp_path / "a" / "sweep", test="welch")[0].read_text(), "model.pos_emb=rope")
    assert "Welch, 5 vs 5 seeds" in welch and "no difference found" in welch  # the same runs, unpaired
    missing = seeded_sweep(tmp_path / "b", {"learned": BASE, "rope": shifted[:4]}, {"rope": [1, 2, 3, 5]})
    text = write_report(missing)[0].read_text()
    assert "Welch, 4 vs 5 seeds" in verdict_line(text, "model.pos_emb=rope")
    assert "Welch: pairing impossible, seed 4 only in the baseline" in text


def test_runs_launched_unpaired_get_welch(tmp_path) -> None:
    sweep = seeded_sweep(tmp_path, {"learned": BASE, "rope": [b + 0.01 for b in BASE]})
    for config in sweep.glob("*/config_resolved.yaml"):
        config.write_text(config.read_text() + "paired_seeds: false\n")
    text = write_report(sweep)[0].read_text()
    assert "Welch: launched with paired_seeds=false" in text


def test_many_variants_are_one_holm_family_ranked_with_intervals(tmp_path) -> None:
    noise = [0.001, -0.002, 0.0, 0.002, -0.001]
    finals = {"learned": BASE, "rope": [b - 0.02 + e for b, e in zip(BASE, noise)],
              "none": [b + 0.003 + e for b, e in zip(BASE, noise[::-1])],
              "alibi": [b - 0.004 + e for b, e in zip(BASE, noise[1:] + noise[:1])]}
    text = write_report(seeded_sweep(tmp_path, finals))[0].read_text()
    comps = {v: compare_paired(BASE, finals[v]) for v in ("rope", "none", "alibi")}
    adjusted = dict(zip(comps, holm([c.p for c in comps.values()])))
    for v, p in adjusted.items():
        assert f"(Holm {p:.3g})" in verdict_line(text, f"model.pos_emb={v}")
    assert "Family: 3 variants tested against one baseline" in text
    table = text.split("## Ranking")[1].split("\n## ")[0]
    ranked = [r.split(" | ")[1] for r in table.splitlines() if r.startswith("| ") and "rank" not in r]
    assert ranked == ["model.pos_emb=rope", "model.pos_emb=alibi", "model.pos_emb=none"]
    alone = write_report(tmp_path / "sweep", correction="none")[0].read_text()
    assert "Holm" not in verdict_line(alone, "model.pos_emb=rope")


def test_margin_and_effect_give_equivalence_and_seeds(tmp_path) -> None:
    same = [b + e for b, e in zip(BASE, [0.0005, -0.0004, 0.0, 0.0003, -0.0002])]
    text = write_report(seeded_sweep(tmp_path, {"learned": BASE, "rope": same}), margin=0.005, effect=0.002)[0]
    text = text.read_text()
    assert "; equivalent within ±0.005 (TOST p=" in verdict_line(text, "model.pos_emb=rope")
    assert "seeds per arm for --effect 0.002" in text and "| paired |" in text and "| unpaired (Welch) |" in text
    tight = write_report(tmp_path / "sweep", margin=0.0003)[0].read_text()
    assert "undecided within ±0.0003" in verdict_line(tight, "model.pos_emb=rope") and "seeds per arm to decide" in \
        verdict_line(tight, "model.pos_emb=rope")
    far = write_report(make_sweep(tmp_path / "far", {"pre": BASE, "post": [b + 0.1 for b in BASE]}), margin=0.005)
    assert "not equivalent: beyond ±0.005" in far[0].read_text()


@pytest.mark.parametrize("option", ["margin", "effect"])
def test_a_margin_or_effect_that_is_not_positive_is_refused(tmp_path, option, capsys) -> None:
    import runpy
    import sys
    from unittest import mock

    from helpers import ROOT

    sweep = seeded_sweep(tmp_path, {"learned": BASE, "rope": BASE})
    with mock.patch.object(sys, "argv", ["scripts/ablation_report.py", str(sweep), f"--{option}", "-0.1"]), \
            pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / "ablation_report.py"), run_name="__main__")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith(f"gptlab: error: --{option}='-0.1' is invalid: use a number in (0, inf)")


def test_tensorboard_gets_each_variants_seed_band(tmp_path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from gptlab.report.runs import group_variants, load_sweep

    sweep = seeded_sweep(tmp_path, {"learned": BASE, "rope": [b - 0.1 for b in BASE]})
    write_report(sweep)
    write_report(sweep)  # a second report rewrites the bands, it does not stack them
    rope = next(v for v in group_variants(load_sweep(sweep)) if v.label == "model.pos_emb=rope")
    assert len(rope.jobs) == 5  # the bands' dir is not read as a job
    events = EventAccumulator(str(sweep / "seed_bands" / "model.pos_emb=rope")).Reload()
    means = [e.value for e in events.Scalars("seeds/val_loss")]
    band = rope.curve("tokens")
    assert means == pytest.approx(band.mean.tolist(), rel=1e-6)
    assert [e.value for e in events.Scalars("x_seed_bands/val_loss_mean")] == pytest.approx(means, rel=1e-6)
    assert [e.value for e in events.Scalars("x_seed_bands/val_loss_low")] == pytest.approx(band.low.tolist(), rel=1e-6)
    assert [e.step for e in events.Scalars("x_seed_bands/val_loss_high")] == [2, 4]  # steps done, as val points read
    for edge, values in (("~mean", band.mean), ("~low", band.low), ("~high", band.high)):  # rope's own card
        card = EventAccumulator(str(sweep / "seed_bands" / edge)).Reload()
        drawn = card.Scalars("seeds/val_loss · model.pos_emb=rope")
        assert [e.value for e in drawn] == pytest.approx(values.tolist(), rel=1e-6)
    from tensorboard.plugins.custom_scalar import layout_pb2

    layout = layout_pb2.Layout()
    layout.ParseFromString(events.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0])
    series = layout.category[0].chart[0].margin.series[0]
    assert (series.value, series.lower, series.upper) == ("x_seed_bands/val_loss_mean", "x_seed_bands/val_loss_low",
                                                          "x_seed_bands/val_loss_high")


def test_bit_identical_paired_arms_are_called_identical_not_undecided(tmp_path) -> None:
    """Issue 54: two arms that gave the same value for every seed fell back to Welch and read "undecided within
    ±0.01 (TOST p=0.423; ~1113 seeds per arm)"."""
    text = write_report(seeded_sweep(tmp_path, {"learned": BASE, "rope": list(BASE)}), margin=0.01)[0].read_text()
    line = verdict_line(text, "model.pos_emb=rope")
    assert "the runs are identical" in line and "undecided" not in line and "TOST" not in line, line
    assert "- model.pos_emb=rope (test): none: both arms ran seeds 1,2,3,4,5" in text
    # the same difference on every seed is still a difference: Welch, as before
    shifted = write_report(seeded_sweep(tmp_path / "s", {"learned": BASE, "rope": [b + 0.01 for b in BASE]}))[0]
    assert "Welch: every seed gave the same difference" in shifted.read_text()


def test_one_seed_per_arm_is_said_to_have_no_test_in_the_tests_line(tmp_path) -> None:
    """The Tests line said "paired: both arms ran seeds 1" where the verdict said no test was possible."""
    text = write_report(seeded_sweep(tmp_path, {"learned": [3.0], "rope": [3.1]}))[0].read_text()
    assert "no test possible" in verdict_line(text, "model.pos_emb=rope")
    tests_line = next(line for line in text.splitlines() if line.startswith("- model.pos_emb=rope (test):"))
    assert tests_line.startswith("- model.pos_emb=rope (test): none:") and "one seed" in tests_line, tests_line


@pytest.mark.parametrize("diff,sigma,margin,paired", [(0.0, 0.0014, 0.0002, True), (0.003, 0.01, 0.004, False),
                                                      (0.0, SIGMA, 0.002, True), (-0.001, 0.02, 0.003, True)])
def test_tost_seeds_is_the_smallest_n_with_80_percent_power(diff, sigma, margin, paired) -> None:
    """The search stepped by n/4 and overshot (1,113 where 1,078 is the smallest): now exact."""
    from gptlab.report.equivalence import tost_power

    n = tost_seeds(diff, sigma, margin, paired=paired)
    assert tost_power(diff, sigma, n, margin, paired=paired) >= 0.8 > tost_power(diff, sigma, n - 1, margin,
                                                                                   paired=paired)


def test_the_power_table_never_plans_fewer_seeds_than_the_reports_own_minimum(tmp_path) -> None:
    """An effect far beyond the noise needs 2 seeds by the power calculation; the report's own rule warns of
    little power below 3, so the table says 3."""
    assert seeds_needed(0.5, SIGMA) == 2
    text = write_report(seeded_sweep(tmp_path, {"learned": BASE, "rope": [b + 0.01 for b in BASE]}), effect=0.5)[0]
    table = text.read_text().split("## Seeds and power")[1]
    rows = [r for r in table.splitlines() if r.startswith("| paired |") or r.startswith("| unpaired (Welch) |")]
    assert rows and all(r.rstrip(" |").rsplit("| ", 1)[-1].strip() == "3" for r in rows), rows
