"""The verdicts of every report that compares arms against a baseline (the ablation, LR-tuned and context reports):
per variant, which test it gets (paired by seed where the runs allow, Welch's where not) and why, Holm's correction
across the variants, and what each verdict is worth: the seeds' power, the seeds an effect needs, equivalence within
a margin, and (the ablation report's final val/loss) the difference in training compute. Each report hands its
measurements in as per-seed Samples, so the choice of test has this one home."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from scipy import stats

from gptlab.report.compute_worth import Worth, compute_worth
from gptlab.report.equivalence import Equivalence, equivalence
from gptlab.report.family import holm
from gptlab.report.power import Sigma, pooled_sigma
from gptlab.report.stats import IDENTICAL, ZERO_VARIANCE, Comparison, compare, compare_paired

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


@dataclass(frozen=True)
class Sample:
    """One arm's measurement per seed (seed -> value) and whether every run behind it was launched with paired seeds
    (a run from before paired_seeds existed drew its data order from the seed alone: paired in data, not in init).
    What every report that compares arms hands to choose_test: final val/loss, loss at the best LR, loss at a
    context."""

    values: dict[str, float]
    paired: bool = True


def job_seed(job: Job) -> str:
    """The job's seed as its `seed` override, else its resolved config's."""
    return str(job.overrides.get("seed", _config(job).get("seed", "?")))


def job_paired(job: Job) -> bool:
    return bool(_config(job).get("paired_seeds", True))


def seeded_values(arm: Arm) -> Sample:
    """The arm's finished jobs' final val/loss by seed."""
    finished = [job for job in arm.jobs if job.summary.get(METRIC) is not None]
    return Sample({job_seed(job): float(job.summary[METRIC]) for job in finished},
                  all(job_paired(job) for job in finished))


def _seed_list(seeds: set[str]) -> str:
    return ",".join(sorted(seeds, key=lambda s: (len(s), s)))


def choose_test(base: Sample, variant: Sample, alpha: float, test: str) -> tuple[Comparison, str]:
    """The paired test when both arms ran the same seeds with paired_seeds on, else Welch's, with the reason: the
    one place any report decides which test a comparison gets."""
    a, b = base.values, variant.values
    welch = compare(list(a.values()), list(b.values()), alpha)
    if test == "welch":
        return welch, "Welch (--test welch): the arms read as independent samples"
    if not (base.paired and variant.paired):
        return welch, "Welch: launched with paired_seeds=false, so the arms share nothing seed by seed"
    if set(a) != set(b):
        missing = [f"seed {_seed_list(set(a) - set(b))} only in the baseline" if set(a) - set(b) else "",
                   f"seed {_seed_list(set(b) - set(a))} only in the variant" if set(b) - set(a) else ""]
        return welch, "Welch: pairing impossible, " + " and ".join(m for m in missing if m)
    seeds = sorted(a, key=lambda s: (len(s), s))
    paired = compare_paired([a[s] for s in seeds], [b[s] for s in seeds], alpha)
    ran = f"both arms ran seeds {_seed_list(set(seeds))} with paired seeds"
    if paired.no_test == ZERO_VARIANCE and all(a[s] == b[s] for s in seeds):  # bit for bit: nothing to test
        return (dataclasses.replace(paired, no_test=IDENTICAL),
                f"none: {ran}, and every seed gave the variant exactly the baseline's value")
    if paired.no_test == ZERO_VARIANCE and welch.testable:
        return welch, "Welch: every seed gave the same difference, so the paired test has no spread to test against"
    if not paired.testable:
        return paired, f"none: {ran}, but {paired.no_test}"
    return paired, f"paired: {ran}"


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
    """The variant's final loss read on the baseline's loss-vs-FLOPs curve, with both arms' seed noise in its
    interval (report.compute_worth)."""
    finished = [job for job in base.jobs if job.summary.get(METRIC) is not None and job.val_curve]
    try:
        curves = {job_seed(job): (job.x_values("flops"), [p.loss for p in job.val_curve]) for job in finished}
        mine = variant.curve("flops")
    except (AttributeError, TypeError):  # a job without a readable model: no FLOPs axis
        return None
    if not curves or mine is None:
        return None
    return compute_worth(curves, seeded_values(variant).values, float(mine.x[-1]), comp.paired, comp.alpha)


@dataclass(frozen=True)
class Spread:
    """The seed noise the sweep measured: each arm's spread pooled over arms, and the spread of the per-seed
    differences pooled over the paired variants (None where there is none)."""

    arms: Sigma | None
    differences: Sigma | None
    correlations: dict[str, float]


def spread(samples: list[Sample], base: Sample, labels: list[str], verdicts: list[Verdict | None],
           alpha: float) -> Spread:
    diffs, corr = [], {}
    for label, mine, v in zip(labels, samples, verdicts):
        if v is not None and v.comparison.paired and v.comparison.testable:
            diffs.append([mine.values[s] - base.values[s] for s in base.values])
            if v.comparison.correlation is not None:
                corr[label] = v.comparison.correlation
    return Spread(pooled_sigma([list(s.values.values()) for s in samples], alpha), pooled_sigma(diffs, alpha), corr)


def judge_samples(labels: list[str], samples: list[Sample], base: int, alpha: float = 0.05, test: str = "paired",
                  correction: str = "holm", margin: float | None = None, untested: dict[int, Comparison] | None = None
                  ) -> tuple[list[Verdict | None], Spread]:
    """One verdict per arm (None for the baseline, at index `base`, and for an arm without values): the test
    choose_test picks, Holm's correction over the tested ones, and with a margin the equivalence verdict; and the
    spread of the seeds they rest on. An arm in `untested` gets that comparison (no test, its reason in no_test)
    and stays out of the family."""
    untested = untested or {}
    chosen = [None if i == base or not s.values or not samples[base].values else
              (untested[i], untested[i].no_test) if i in untested else
              choose_test(samples[base], s, alpha, test) for i, s in enumerate(samples)]
    comps = with_family([c[0] if c else None for c in chosen], correction)
    verdicts = [None if c is None else Verdict(comp, c[1]) for c, comp in zip(chosen, comps)]
    found = spread(samples, samples[base], labels, verdicts, alpha)
    out: list[Verdict | None] = []
    for v in verdicts:
        sigma = v and (found.differences if v.comparison.paired else found.arms)
        eq = equivalence(v.comparison, margin, sigma and sigma.value) if v and margin else None
        out.append(v and dataclasses.replace(v, equivalence=eq))
    return out, found


def judge(arms: list[Arm], base: Arm, alpha: float = 0.05, test: str = "paired", correction: str = "holm",
          margin: float | None = None) -> tuple[list[Verdict | None], Spread]:
    """The ablation report's verdicts on final val/loss, each with its worth in compute."""
    judged, found = judge_samples([a.label for a in arms], [seeded_values(a) for a in arms],
                                  next(i for i, a in enumerate(arms) if a is base), alpha,
                                  test, correction, margin)
    return [v and dataclasses.replace(v, worth=worth(base, arm, v.comparison)) for arm, v in zip(arms, judged)], found
