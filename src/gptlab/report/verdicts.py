"""The ablation report's verdicts: per variant, which test it gets (paired by seed where the runs allow, Welch's
where not) and why, Holm's correction across the variants, and what each verdict is worth: the seeds' power, the
seeds an effect needs, equivalence within a margin, and the difference in training compute."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import yaml
from scipy import stats

from gptlab.report.compute_worth import Worth, compute_worth
from gptlab.report.equivalence import Equivalence, equivalence
from gptlab.report.family import holm
from gptlab.report.power import Sigma, pooled_sigma
from gptlab.report.stats import ZERO_VARIANCE, Comparison, compare, compare_paired

TESTS = ("paired", "welch")  # --test: paired where valid (the default), or Welch's on every comparison
CORRECTIONS = ("holm", "none")
RESOLVED = "config_resolved.yaml"
METRIC = "final_val_loss"


class Job(Protocol):
    job_dir: Path
    overrides: dict[str, str]
    summary: dict


class Arm(Protocol):
    label: str
    jobs: list[Any]

    def curve(self, axis: str, band: str = "minmax") -> Any: ...


@dataclass(frozen=True)
class Verdict:
    comparison: Comparison
    why: str  # the test used and why, e.g. "paired: both arms ran seeds 1-8 with paired_seeds=true"
    equivalence: Equivalence | None = None
    worth: Worth | None = None


def _config(job: Job) -> dict:
    path = job.job_dir / RESOLVED
    try:
        loaded = yaml.safe_load(path.read_text()) if path.is_file() else {}
    except (OSError, yaml.YAMLError):
        loaded = {}
    return loaded if isinstance(loaded, dict) else {}


def seeded_values(arm: Arm) -> tuple[dict[str, float], bool]:
    """seed -> final val/loss of the arm's finished jobs, and whether every job ran with paired seeds (a run from
    before paired_seeds existed drew its data order from the seed alone: paired in data, not in init)."""
    values, paired = {}, True
    for job in arm.jobs:
        final = job.summary.get(METRIC)
        if final is None:
            continue
        config = _config(job)
        values[str(job.overrides.get("seed", config.get("seed", "?")))] = float(final)
        paired = paired and bool(config.get("paired_seeds", True))
    return values, paired


def _seed_list(seeds: set[str]) -> str:
    return ",".join(sorted(seeds, key=lambda s: (len(s), s)))


def choose_test(base: Arm, variant: Arm, alpha: float, test: str) -> tuple[Comparison, str]:
    """The paired test when both arms ran the same seeds with paired_seeds on, else Welch's, with the reason."""
    a, a_paired = seeded_values(base)
    b, b_paired = seeded_values(variant)
    welch = compare(list(a.values()), list(b.values()), alpha)
    if test == "welch":
        return welch, "Welch (--test welch): the arms read as independent samples"
    if not (a_paired and b_paired):
        return welch, "Welch: launched with paired_seeds=false, so the arms share nothing seed by seed"
    if set(a) != set(b):
        missing = [f"seed {_seed_list(set(a) - set(b))} only in the baseline" if set(a) - set(b) else "",
                   f"seed {_seed_list(set(b) - set(a))} only in the variant" if set(b) - set(a) else ""]
        return welch, "Welch: pairing impossible, " + " and ".join(m for m in missing if m)
    seeds = sorted(a, key=lambda s: (len(s), s))
    paired = compare_paired([a[s] for s in seeds], [b[s] for s in seeds], alpha)
    if paired.no_test == ZERO_VARIANCE and welch.testable:
        return welch, "Welch: every seed gave the same difference, so the paired test has no spread to test against"
    return paired, f"paired: both arms ran seeds {_seed_list(set(seeds))} with paired seeds"


def with_family(comps: list[Comparison | None], correction: str) -> list[Comparison | None]:
    """Holm-adjusted p-values on the tested comparisons when more than one variant was tested."""
    tested = [i for i, c in enumerate(comps) if c is not None and c.testable]
    if correction == "none" or len(tested) < 2:
        return comps
    adjusted = holm([comps[i].p for i in tested])
    out = list(comps)
    for i, p in zip(tested, adjusted):
        out[i] = dataclasses.replace(comps[i], family=len(tested), p_family=p)
    return out


def simultaneous(comp: Comparison) -> tuple[float, float] | None:
    """The interval at level 1 − alpha/k for k variants (Bonferroni): all k cover together with chance ≥ 1 − alpha,
    so a ranking read from them holds family-wise."""
    if not comp.testable or comp.se is None:
        return None
    half = float(stats.t.ppf(1 - comp.alpha / (2 * comp.family), comp.dof)) * comp.se
    return comp.diff - half, comp.diff + half


def worth(base: Arm, variant: Arm, comp: Comparison) -> Worth | None:
    """The variant's final loss read on the baseline's loss-vs-FLOPs curve (report.compute_worth)."""
    try:
        curve, mine = base.curve("flops"), variant.curve("flops")
    except (AttributeError, TypeError):  # a job without a readable model: no FLOPs axis
        return None
    if curve is None or mine is None:
        return None
    base_final = float(np.mean(list(seeded_values(base)[0].values())))
    ends = (base_final + comp.ci_low, base_final + comp.ci_high) if comp.testable else (None, None)
    return compute_worth(curve.x, curve.mean, base_final + comp.diff, float(mine.x[-1]), *ends)


@dataclass(frozen=True)
class Spread:
    """The seed noise the sweep measured: each arm's spread pooled over arms, and the spread of the per-seed
    differences pooled over the paired variants (None where there is none)."""

    arms: Sigma | None
    differences: Sigma | None
    correlations: dict[str, float]


def spread(arms: list[Arm], base: Arm, verdicts: list[Verdict | None], alpha: float) -> Spread:
    values = [seeded_values(a)[0] for a in arms]
    diffs, corr = [], {}
    base_values = seeded_values(base)[0]
    for arm, mine, v in zip(arms, values, verdicts):
        if v is not None and v.comparison.paired and v.comparison.testable:
            diffs.append([mine[s] - base_values[s] for s in base_values])
            if v.comparison.correlation is not None:
                corr[arm.label] = v.comparison.correlation
    return Spread(pooled_sigma([list(v.values()) for v in values], alpha), pooled_sigma(diffs, alpha), corr)


def judge(arms: list[Arm], base: Arm, alpha: float = 0.05, test: str = "paired", correction: str = "holm",
          margin: float | None = None) -> tuple[list[Verdict | None], Spread]:
    """One verdict per arm (None for the baseline), and the spread of the seeds they rest on."""
    chosen = [None if arm is base else choose_test(base, arm, alpha, test) for arm in arms]
    comps = with_family([c[0] if c else None for c in chosen], correction)
    verdicts = [None if c is None else Verdict(comp, c[1]) for c, comp in zip(chosen, comps)]
    found = spread(arms, base, verdicts, alpha)
    out: list[Verdict | None] = []
    for arm, v in zip(arms, verdicts):
        if v is None:
            out.append(None)
            continue
        sigma = found.differences if v.comparison.paired else found.arms
        eq = equivalence(v.comparison, margin, sigma and sigma.value) if margin else None
        out.append(dataclasses.replace(v, equivalence=eq, worth=worth(base, arm, v.comparison)))
    return out, found
