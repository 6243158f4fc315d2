"""The ablation report's verdicts as JSON (`scripts/ablation_report.py --json`), for a script or an agent that
reads a sweep without parsing markdown: the same judge() as the markdown report, so the two never disagree.
Schema version SCHEMA (docs/campaigns.md#the-reports-json)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gptlab.report.runs import drop_repeats, group_variants, load_sweep, pick_baseline
from gptlab.report.verdicts import Verdict, judge, seeded_values

SCHEMA = 1


def _verdict(v: Verdict | None) -> dict[str, Any] | None:
    if v is None:
        return None
    c = v.comparison
    out = {"test": c.test, "why": v.why, "diff": c.diff, "ci_low": c.ci_low, "ci_high": c.ci_high, "p": c.p,
           "p_holm": c.p_family, "family": c.family, "significant": c.significant, "no_test": None if c.testable
           else c.no_test}
    if v.equivalence is not None:
        out["equivalence"] = dataclasses.asdict(v.equivalence)
    return out


def sweep_verdicts(sweep_dir: Path, baseline: str | None = None, alpha: float = 0.05, test: str = "paired",
                   correction: str = "holm", margin: float | None = None) -> dict[str, Any]:
    jobs, _ = drop_repeats(load_sweep(sweep_dir))
    variants = group_variants(jobs)
    base = pick_baseline(variants, baseline)
    judged, _ = judge(variants, base, alpha, test, correction, margin)
    return {"schema": SCHEMA, "sweep_dir": str(sweep_dir), "baseline": base.label, "alpha": alpha,
            "correction": correction,
            "variants": [{"variant": v.label, "seeds": seeded_values(v).values, "verdict": _verdict(j)}
                         for v, j in zip(variants, judged)]}
