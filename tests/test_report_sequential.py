"""The sequential sweep's stopping rule: looks at growing seed counts, each at its share of alpha, keep the error
rate at alpha over all looks where testing at alpha at every look does not, and save seeds when the effect is real
(a numpy-vectorised simulation of 4,000 sequential sweeps)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from gptlab.report.sequential import look_alphas, looks

SWEEPS, SIGMA_D = 4000, 0.001


def run_looks(effect: float, shares: list[float], counts: list[int], rng: np.random.Generator):
    """Seeds per arm at which each simulated sweep stopped (paired differences; the budget if never), and whether
    it stopped on a significant test."""
    diffs = rng.normal(effect, SIGMA_D, (SWEEPS, counts[-1]))
    stopped = np.full(SWEEPS, counts[-1])
    rejected = np.zeros(SWEEPS, dtype=bool)
    for n, share in zip(counts, shares):
        p = stats.ttest_1samp(diffs[:, :n], 0.0, axis=1).pvalue
        new = ~rejected & (p < share)
        stopped[new], rejected = n, rejected | new
    return stopped, rejected


def test_looks_and_their_alpha_shares() -> None:
    assert looks(3, 2, 9) == [3, 5, 7, 9] and looks(3, 4, 9) == [3, 7, 9] and looks(9, 2, 9) == [9]
    shares = look_alphas([3, 5, 7, 9], 0.05)
    assert sum(shares) == pytest.approx(0.05) and shares[0] == pytest.approx(0.05 / 9)


def test_repeated_looks_keep_the_error_rate_and_save_seeds() -> None:
    counts = looks(3, 2, 9)
    rng = np.random.default_rng(5)
    _, false_spent = run_looks(0.0, look_alphas(counts, 0.05), counts, rng)
    _, false_naive = run_looks(0.0, [0.05] * len(counts), counts, rng)
    stopped, found = run_looks(0.002, look_alphas(counts, 0.05), counts, rng)
    spent_rate, naive_rate = float(false_spent.mean()), float(false_naive.mean())
    print(f"no effect, looks at {counts}: false verdicts {spent_rate:.3f} with alpha spent, {naive_rate:.3f} testing "
          f"at 0.05 each look; effect 2 sigma: found in {found.mean():.3f}, mean seeds per arm {stopped.mean():.2f} "
          f"of {counts[-1]}")
    tolerance = 3 * np.sqrt(0.05 * 0.95 / SWEEPS)
    assert spent_rate < 0.05 + tolerance < naive_rate
    assert found.mean() > 0.8 and stopped.mean() < counts[-1] - 2  # a real effect stops early


def test_a_start_above_the_budget_is_one_line_with_a_way_out(tmp_path, capsys) -> None:
    import runpy
    import sys
    from unittest import mock

    from helpers import ROOT

    argv = ["scripts/sequential_sweep.py", str(tmp_path / "seq"), "--start", "5", "--budget", "3", "--", "x=1"]
    with mock.patch.object(sys, "argv", argv), pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / "sequential_sweep.py"), run_name="__main__")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and "e.g. --start 3 --step 2 --budget 9" in err, err
    assert looks(3, 2, 9) == [3, 5, 7, 9] and not (tmp_path / "seq").exists()  # the way out is a valid plan


def run_sequential(argv: list[str], capsys) -> tuple[int, str, list]:
    """scripts/sequential_sweep.py in this process, its training launches recorded instead of run."""
    import runpy
    import sys
    from unittest import mock

    from helpers import ROOT

    launched = []
    with mock.patch.object(sys, "argv", ["scripts/sequential_sweep.py", *argv]), \
            mock.patch("gptlab.launch.child_run.run", side_effect=lambda command, **_: launched.append(command) or 0), \
            pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / "sequential_sweep.py"), run_name="__main__")
    return exit_.value.code, capsys.readouterr().err, launched


def test_a_resume_that_changes_the_plan_is_refused_and_the_plan_it_names_resumes(tmp_path, capsys) -> None:
    import json

    seq = tmp_path / "seq"
    plan = ["--start", "3", "--step", "2", "--budget", "9", "--", "model.pos_emb=learned,rope"]
    code, err, launched = run_sequential([str(seq), *plan], capsys)  # round 1 "ran" nothing: no job to read
    assert code == 2 and len(launched) == 1 and "seed=1,2,3" in launched[0][-2]
    assert json.loads((seq / "sequential_plan.json").read_text())["budget"] == 9
    changed = [str(seq), "--start", "4", "--step", "2", "--budget", "12", "--margin", "0.005", "--",
               "model.pos_emb=learned,rope"]
    code, err, launched = run_sequential(changed, capsys)
    assert code == 2 and not launched and len(err.splitlines()) == 1, err
    assert 'start=3, budget=9, margin=null and this command asks start=4, budget=12, margin=0.005' in err
    assert "Resume with the plan it started with (--start 3 --budget 9 without --margin)" in err
    code, err, launched = run_sequential([str(seq), *plan], capsys)  # the plan it names: resumes round 1
    assert "was started with" not in err and launched and "seed=1,2,3" in launched[0][-2]
