"""A sweep that adds seeds until its verdicts are decided: looks after n_1 < n_2 < ... ≤ budget seeds per arm, each
look testing at its own share of alpha from an alpha-spending function (Lan & DeMets 1983; here Kim & DeMets'
power family, spent alpha·(n_k / budget)², which like O'Brien–Fleming's spends little at the early, noisy looks).

Why the error rate holds under repeated looks: a false verdict at any look is the union of a false verdict at look
1, at look 2, ...; its chance is at most the sum of each look's chance (Boole's inequality), and each look's test is
exact at its share, so the total is at most the sum of the shares, alpha. This needs no model of how the looks
depend on each other (unequal variances, a paired or Welch test, sigma estimated anew at each look all keep it);
the price is that it is conservative next to a group-sequential boundary computed from that dependence.
A verdict is decided when its test is significant at its look's share, or (with a margin) equivalent by TOST at it.

That holds for a plan fixed before the first look: the looks, alpha, the margin, the baseline and the sweep. A
resumed sweep that changed them would spend alpha on looks its first part never planned, so the plan is recorded in
the sweep's dir (PLAN_FILE) and a resume must ask for the same one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PLAN_FILE = "sequential_plan.json"


def looks(start: int, step: int, budget: int) -> list[int]:
    """Seeds per arm at each look: start, start + step, ..., with the budget as the last look."""
    counts = list(range(start, budget, step))
    return [*counts, budget] if not counts or counts[-1] != budget else counts


def spent(n: int, budget: int, alpha: float) -> float:
    """Alpha spent up to a look with n of budget seeds per arm."""
    return alpha * min(1.0, n / budget) ** 2


def look_alphas(counts: Sequence[int], alpha: float) -> list[float]:
    """Each look's share: the spending function's increment since the previous look; they sum to alpha."""
    budget, shares, before = counts[-1], [], 0.0
    for n in counts:
        now = spent(n, budget, alpha)
        shares.append(now - before)
        before = now
    return shares


def look_verdicts(round_dirs: Sequence[Path], baseline: str | None, alpha: float, margin: float | None):
    """The verdicts on every job of the rounds so far, at this look's share of alpha: (variants' labels, verdicts,
    whether every one is decided)."""
    from gptlab.report.runs import drop_repeats, group_variants, load_sweep, pick_baseline
    from gptlab.report.verdicts import judge

    jobs, _ = drop_repeats([job for d in round_dirs for job in load_sweep(d)])
    variants = group_variants(jobs)
    base = pick_baseline(variants, baseline)
    verdicts, _ = judge(variants, base, alpha, "paired", "holm", margin)
    labels = [v.label for v, j in zip(variants, verdicts) if j is not None]
    judged = [j for j in verdicts if j is not None]
    return labels, judged, bool(judged) and all(decided(j) for j in judged)


def decided(verdict) -> bool:
    """Significant at the look's share of alpha, or equivalent within the margin at it."""
    eq = verdict.equivalence
    return verdict.comparison.significant or (eq is not None and eq.verdict == "equivalent")


def plan_refusal(recorded: dict[str, Any], asked: dict[str, Any], where: Path) -> str | None:
    """Why a resume of the sequential sweep in `where` may not go on with the plan `asked` (None: it may): what
    differs from the plan it was started with, and the flags that resume it as started."""
    changed = [key for key in recorded if recorded[key] != asked.get(key)]
    if not changed:
        return None
    as_started = " ".join(f"--{key} {recorded[key]}" if recorded[key] is not None else f"without --{key}"
                          for key in changed if key != "overrides")
    return (f"{where} was started with {', '.join(f'{k}={json.dumps(recorded[k])}' for k in changed)} and this "
            f"command asks {', '.join(f'{k}={json.dumps(asked.get(k))}' for k in changed)}: the looks and their alpha "
            f"shares are fixed when a sequential sweep starts, so a resume that changed them would not hold its error "
            f"rate. Resume with the plan it started with" + (f" ({as_started})" if as_started else "")
            + (f" and -- {' '.join(recorded['overrides'])}" if "overrides" in changed else "")
            + ", or start the new plan in another dir.")
