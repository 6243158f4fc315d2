"""gptlab.report.lr_tuning on synthetic job records: curves, Wortsman's sensitivity, disjoint-seed selection and
the edge-of-grid flag."""

from __future__ import annotations

import math

import pytest

from gptlab.report.lr_tuning import LrRun, best_lr, lr_curve, sensitivity, split_seeds, tuned_comparison

GRID = (1e-3, 3e-3, 1e-2, 3e-2)
CAP = math.log(257)  # the byte tokenizer's loss at init (uniform over 257 ids)


def bowl(variant: str, best: float, depth: float, seeds: tuple[str, ...] = ("1", "2", "3", "4")) -> list[LrRun]:
    """loss = depth + (log10 lr − log10 best)², plus a small seed offset: a variant whose optimum is `best`."""
    return [LrRun(variant, lr, s, depth + (math.log10(lr) - math.log10(best)) ** 2 + 0.001 * int(s),
                  bpb=None) for lr in GRID for s in seeds]


def test_curve_means_and_diverged_runs() -> None:
    runs = bowl("a", 3e-3, 2.0, ("1", "2"))
    runs[-1] = LrRun("a", 3e-2, "2", None)  # the highest LR diverged on seed 2
    curve = lr_curve(runs)
    assert [p.lr for p in curve] == list(GRID)
    assert curve[1].loss.mean == pytest.approx(2.0 + 0.0015) and curve[1].loss.n == 2
    assert curve[-1].diverged == 1 and curve[-1].loss.n == 1


def test_sensitivity_is_the_mean_capped_excess_over_the_best() -> None:
    runs = [LrRun("a", 1e-3, "1", 3.0), LrRun("a", 1e-2, "1", 2.0), LrRun("a", 1e-1, "1", None)]
    # excess: 1.0, 0.0, and the diverged run capped at L0: CAP - 2.0
    assert sensitivity(runs, CAP) == pytest.approx((1.0 + 0.0 + CAP - 2.0) / 3)
    runs[0] = LrRun("a", 1e-3, "1", 9.0)  # worse than init counts as init
    assert sensitivity(runs, CAP) == pytest.approx((CAP - 2.0 + 0.0 + CAP - 2.0) / 3)


def test_best_lr_is_picked_on_selection_seeds_and_tested_on_the_others() -> None:
    split = split_seeds(["3", "1", "10", "2"])
    assert split.select == ("1", "2") and split.test == ("3", "10") and split.disjoint
    base = bowl("base", 3e-3, 2.0)
    # The variant's LR 1e-2 looks best on seeds 1, 2 by luck; on seeds 3, 10 its 3e-3 is better.
    var = [LrRun("var", lr, s, {1e-3: 2.5, 3e-3: 1.9, 1e-2: 1.8 if s in "12" else 2.2, 3e-2: 2.6}[lr]
                 + 0.0001 * int(s)) for lr in GRID for s in ("1", "2", "3", "10")]
    base = [LrRun("base", r.lr, {"4": "10"}.get(r.seed, r.seed), r.loss) for r in base]  # loss offset 0.004
    split, results, _ = tuned_comparison(base + var, "base", CAP)
    by = {r.variant: r for r in results}
    assert by["var"].best.lr == 1e-2 and by["var"].best.edge is None
    assert by["var"].test_losses == pytest.approx({"3": 2.2003, "10": 2.2010})  # held-out seeds at the selected LR
    assert by["base"].best.lr == 3e-3 and by["base"].comparison is None
    comp = by["var"].comparison
    assert comp.diff == pytest.approx(2.20065 - (2.0 + 0.001 * (3 + 4) / 2))  # held-out means only
    assert split.disjoint


def test_too_few_seeds_reuse_them_and_say_so() -> None:
    split = split_seeds(["1", "2"])
    assert split.select == split.test == ("1", "2") and not split.disjoint
    split, results, _ = tuned_comparison(bowl("a", 3e-3, 2.0, ("1", "2")) + bowl("b", 3e-3, 1.9, ("1", "2")), "a",
                                         CAP)
    assert not split.disjoint and results[1].comparison.diff == pytest.approx(-0.1)


def test_an_optimum_at_the_grid_edge_is_flagged_with_the_direction_to_widen() -> None:
    high = best_lr(bowl("b", 1e-1, 2.0), ["1", "2"], CAP)
    assert high.lr == 3e-2 and high.edge == "highest" and "widen the grid toward higher LRs" in high.widen
    low = best_lr(bowl("c", 1e-4, 2.0), ["1", "2"], CAP)
    assert low.lr == 1e-3 and low.edge == "lowest" and "toward lower LRs" in low.widen
    inside = best_lr(bowl("d", 3e-3, 2.0), ["1", "2"], CAP)
    assert inside.edge is None and inside.widen is None
