"""A variant against the campaign's current baseline: the ablation report's test (paired by seed where the arms
allow, Welch's where not), made one-sided (the question is "is it better?"), at a matched budget, and at the level
the online procedure grants. The interval shown is the two-sided one at 1 − 2·level, whose upper end is the
one-sided bound: a claim is an interval wholly below zero."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from gptlab.campaign.ledger import Campaign, Record
from gptlab.report import power
from gptlab.report.stats import Comparison
from gptlab.report.verdicts import Sample, choose_test

METRIC = "final_val_loss"
# seconds: of training steps, validation not counted (the run summary's train_seconds), what budget=seconds:N bounds
BUDGET_METRIC = {"tokens": "tokens", "flops": "flops", "seconds": "train_seconds"}
MATCH = 0.01  # arms within 1% of each other's budget are at the matched budget


@dataclass(frozen=True)
class Test:
    comparison: Comparison | None
    why: str  # the test and why, or why there is none
    p: float | None = None  # one-sided: variant lower than baseline


def arm_runs(campaign: Campaign, variant: str, purpose: str) -> list[Record]:
    return [r for r in campaign.of("run") if r.tag("variant") == variant and r.tag("purpose") == purpose]


def sample(runs: list[Record]) -> Sample:
    return Sample({r.tag("seed"): r.metrics[METRIC] for r in runs if METRIC in r.metrics},
                  all(r.tag("paired") == "true" for r in runs))


def budget_refusal(base: list[Record], mine: list[Record], budget: str) -> str:
    """Why the arms are not at a matched budget (empty when they are): a wall-clock budget compares only runs on
    one device kind and one machine; tokens and FLOPs must agree within 1%."""
    if budget == "seconds":
        for tag in ("device", "host"):
            seen = sorted({r.tag(tag) for r in base + mine})
            if len(seen) > 1:
                return (f"wall-clock verdict refused: the arms ran on different {tag}s ({'; '.join(seen)}), where a "
                        "second buys different training; compare at a tokens or flops budget, or rerun both arms on "
                        "one machine")
    values = [r.metrics.get(BUDGET_METRIC[budget]) for r in base + mine]
    if any(v is None for v in values):
        return f"no {budget} recorded for every run, so the budget cannot be matched"
    if max(values) > (1 + MATCH) * min(values):
        return (f"unmatched budget: {budget} range {min(values):.4g}..{max(values):.4g} across the arms (more than "
                f"{MATCH:.0%} apart); run both arms to the same {budget} (docs/campaigns.md, budgets)")
    return ""


def one_sided(comp: Comparison) -> float | None:
    if not comp.testable or comp.se is None:
        return None
    return float(stats.t.cdf(comp.diff / comp.se, comp.dof))


def test(base: list[Record], mine: list[Record], budget: str | None) -> Test:
    refused = budget_refusal(base, mine, budget) if budget else ""
    if refused:
        return Test(None, refused)
    comp, why = choose_test(sample(base), sample(mine), 0.05, "paired")
    p = one_sided(comp)
    return Test(comp, why if p is not None else comp.no_test, p)


def seeds_needed(comp: Comparison, level: float) -> int | None:
    """Seeds per arm that find this difference with 80% power at this level (one-sided, so the two-sided test at
    2·level), from the comparison's own spread; None when none within the report's cap would."""
    n = comp.seeds[1]
    sigma = comp.se * math.sqrt(n if comp.paired else n / 2)
    return power.seeds_needed(abs(comp.diff), sigma, min(2 * level, 0.5), comp.paired)


def interval(comp: Comparison, level: float) -> tuple[float, float]:
    """diff ± t(1 − level)·se: the two-sided interval at 1 − 2·level."""
    half = float(stats.t.ppf(1 - level, comp.dof)) * comp.se
    return comp.diff - half, comp.diff + half
