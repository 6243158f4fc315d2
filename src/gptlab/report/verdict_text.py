"""The words and tables of the ablation report's verdicts (report.verdicts computes them): the tests used and why,
the seeds' power and the seeds an effect needs, and the variants ranked with family-wise intervals."""

from __future__ import annotations

from gptlab.report.power import Sigma, detectable_effect, seeds_needed
from gptlab.report.stats import MIN_SEEDS, Comparison
from gptlab.report.verdicts import Spread, Verdict, simultaneous


def tests_paragraph(labels: list[str], verdicts: list[Verdict | None], alpha: float) -> str:
    """Which test each variant got and why, and the family's correction."""
    lines = [f"- {label} (test): {v.why}\n" for label, v in zip(labels, verdicts) if v is not None]
    text = ("Tests: the paired t-test on per-seed differences where both arms ran the same seeds with paired seeds "
            "(one seed: the same data order, and the same initial weights for the tensors both arms have), so the "
            "noise they share cancels; Welch's t-test (unequal variances) where they did not. Δ is the variant's "
            "mean minus the baseline's (negative: lower loss), with its confidence interval (Student's t; Welch–"
            f"Satterthwaite dof for Welch) at alpha = {alpha}. A variant with one seed, or compared with a one-seed "
            "baseline, gets no test; so does a comparison with zero variance.\n\n" + "".join(lines))
    family = next((v.comparison.family for v in verdicts if v is not None and v.comparison.family > 1), 0)
    if family:
        text += (f"\nFamily: {family} variants tested against one baseline; significance is read on Holm's adjusted "
                 f"p (family-wise error ≤ {alpha} whatever the tests' dependence; --correction none for each test "
                 "alone).\n")
    return text + "\n"


def _sigma(s: Sigma, level: str) -> str:
    return f"{s.value:.4g} [{s.low:.4g}, {s.high:.4g}] ({level} interval, {s.dof} dof)"


def _seeds(n: int | None) -> str:
    """Seeds per arm to plan: never fewer than MIN_SEEDS, the report's own rule for a test with power (a power
    calculation alone may say 2 where the noise is tiny next to the effect)."""
    return "more than 100,000" if n is None else f"{max(n, MIN_SEEDS):,}"


def power_section(found: Spread, n_seeds: int, alpha: float, effect: float | None,
                  metric: str = "final val/loss") -> str:
    """The seed sigma, the smallest effect these seeds detect, and the seeds per arm an `--effect` needs."""
    level = f"{1 - alpha:.0%}"
    if found.arms is None:
        return (f"## Seeds and power\n\nNo arm has two seeds with a {metric}: no seed sigma to plan from. "
                "Launch with seed=1,2,3 (or more).\n\n")
    text = f"## Seeds and power\n\nSeed sigma of {metric}, pooled over the arms: {_sigma(found.arms, level)}.\n"
    if found.differences is not None:
        text += (f"Sigma of the per-seed differences from the baseline, pooled over the paired variants: "
                 f"{_sigma(found.differences, level)}.\n")
    if found.correlations:
        text += "Per-seed correlation with the baseline: " + ", ".join(
            f"{label} r={r:+.2f}" for label, r in found.correlations.items()) + ".\n"
    rows = [("unpaired (Welch)", found.arms.value, False)]
    if found.differences is not None:
        rows.insert(0, ("paired", found.differences.value, True))
    text += f"\nAt alpha = {alpha} (one test; Holm asks more of all but the strongest) and 80% power:\n\n"
    text += f"| test | sigma | smallest effect {n_seeds} seeds per arm detect |" + (
        f" seeds per arm for --effect {effect:g} |" if effect else "") + "\n|---|---|---|" + ("---|" if effect else "")
    for name, sigma, paired in rows:
        detect = detectable_effect(sigma, n_seeds, alpha, paired)
        text += f"\n| {name} | {sigma:.4g} | {'—' if detect is None else format(detect, '.4g')} |"
        if effect:
            text += f" {_seeds(seeds_needed(effect, sigma, alpha, paired))} |"
    return text + ("\n\nThe sigma is the sweep's own estimate: its interval carries into every figure here (at the "
                   "interval's high end the seeds needed grow by (high/sigma)²)"
                   + (f"; no arm is planned with fewer than {MIN_SEEDS} seeds, the report's own minimum for a test "
                      "with power" if effect else "") + ".\n\n")


def ranking(labels: list[str], verdicts: list[Verdict | None], digits: int = 4, metric: str = "final val/loss") -> str:
    """The tested variants from lowest to highest Δ, with simultaneous intervals, Holm's p and, where the report
    reads one, the compute worth."""
    tested = [(label, v) for label, v in zip(labels, verdicts) if v is not None and v.comparison.testable]
    if len(tested) < 2:
        return ""
    k = tested[0][1].comparison.family
    level = f"{1 - tested[0][1].comparison.alpha:.0%}"
    worths = any(v.worth for _, v in tested)
    text = (f"## Ranking ({len(tested)} variants, lowest Δ first)\n\nIntervals at {level} for all {k} together "
            "(Bonferroni: each at alpha/k), so a ranking read from non-overlapping ones holds family-wise.\n\n"
            f"| rank | variant | Δ {metric} | simultaneous {level} interval | test | p (Holm) |"
            + (" worth in compute |" if worths else "") + "\n|---|---|---|---|---|---|" + ("---|" if worths else "")
            + "\n")
    for rank, (label, v) in enumerate(sorted(tested, key=lambda lv: lv[1].comparison.diff), start=1):
        c: Comparison = v.comparison
        low, high = simultaneous(c)
        p = c.p_family if c.p_family is not None else c.p
        text += (f"| {rank} | {label} | {c.diff:+.{digits}f} | [{low:+.{digits}f}, {high:+.{digits}f}] | "
                 f"{'paired t' if c.paired else 'Welch'} | {p:.3g} |"
                 + (f" {v.worth.text() if v.worth else '—'} |" if worths else "") + "\n")
    return text + "\n"


def worth_note() -> str:
    return ("Worth in compute: the baseline's mean val/loss curve against training FLOPs read at the variant's "
            "final loss, m = C_baseline / C_variant (m > 1: the variant saves compute); its interval carries the seed "
            "noise of both arms, the baseline's curve included (a jackknife over seeds with Student's t, "
            "gptlab.report.compute_worth); \"beyond the curve\" where the baseline's curve does not reach that loss "
            "(no extrapolation), \"beyond\" for an interval end outside the FLOPs it spans.\n\n")
