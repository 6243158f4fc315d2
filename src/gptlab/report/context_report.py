"""`ablation_report.py <sweep dir> --context L`: the variants compared on their loss at context L instead of their
final val/loss at the trained context, from each job's context_eval.json (written by `src/eval.py ckpt_path=<sweep
dir> contexts=[...]`). Jobs, variants and the baseline are the ablation report's (report.runs), and so are its
verdicts (report.verdicts: paired by seed where the seeds pair, else Welch's; Holm over the variants; --margin,
--effect). Each job also gets its change from the trained context (loss at L minus loss at T, the same job's weights
on the same targets), the number that says whether a scheme extrapolates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gptlab.atomic import atomic_write_text
from gptlab.errors import ConfigError
from gptlab.eval.context_plot import plot_loss_by_position
from gptlab.eval.context_results import RESULTS_FILE, read_results
from gptlab.report.output_dir import report_dir
from gptlab.report.runs import (
    JobResult,
    Variant,
    check_options,
    check_verdict_options,
    drop_repeats,
    fmt_summary,
    group_variants,
    jobs_section,
    load_sweep,
    markdown,
    pick_baseline,
)
from gptlab.report.stats import Summary, verdict
from gptlab.report.verdict_text import power_section, ranking, tests_paragraph
from gptlab.report.verdicts import Sample, Verdict, job_paired, job_seed, judge_samples


def _records(jobs: list[JobResult], sweep_dir: Path) -> dict[Path, dict[str, Any]]:
    """Each job's context_eval.json; a job without one is left out of the comparison (and named)."""
    found = {}
    for job in jobs:
        path = job.job_dir / RESULTS_FILE
        if path.is_file():
            try:
                found[job.job_dir] = read_results(path)
            except ValueError as err:
                raise ConfigError(f"{path} cannot be read ({err}); score the sweep again: python src/eval.py "
                                  f"ckpt_path={sweep_dir} contexts=[...].") from err
    return found


def _loss(record: dict[str, Any] | None, context: int) -> float | None:
    entry = (record or {}).get("contexts", {}).get(str(context), {})
    return entry.get("loss")


def _rise(record: dict[str, Any] | None, context: int) -> float | None:
    """loss at `context` minus loss at the job's trained context (None when either is missing)."""
    at, trained = _loss(record, context), _loss(record, (record or {}).get("trained_context", -1))
    return None if at is None or trained is None else at - trained


def _refusals(variant: Variant, records: dict[Path, dict[str, Any]], context: int) -> list[str]:
    reasons = {(records.get(j.job_dir) or {}).get("contexts", {}).get(str(context), {}).get("refused")
               for j in variant.jobs}
    return sorted(r for r in reasons if r)


def _sample(variant: Variant, records: dict[Path, dict[str, Any]], context: int) -> Sample:
    """The variant's loss at `context` by seed, from the jobs scored there."""
    scored = [(j, loss) for j in variant.jobs if (loss := _loss(records.get(j.job_dir), context)) is not None]
    return Sample({job_seed(j): float(loss) for j, loss in scored}, all(job_paired(j) for j, _ in scored))


def _table(variants: list[Variant], records: dict[Path, dict[str, Any]], contexts: list[int], context: int,
           base: Variant, verdicts: list[Verdict | None], alpha: float) -> tuple[str, list[str]]:
    level = f"{1 - alpha:.0%}"
    header = ["variant", "n", "trained T", *(f"loss @ {c}" for c in contexts), f"loss @ {context} − loss @ T",
              f"Δ loss @ {context} vs baseline ({level} CI)", "p (test)"]
    rows, lines = [], []
    for variant, judged in zip(variants, verdicts):
        recs = [records.get(j.job_dir) for j in variant.jobs]
        n = sum(_loss(r, context) is not None for r in recs)
        trained = sorted({r["trained_context"] for r in recs if r})
        diff, p = ("baseline", "") if variant is base else ("—", "—")
        if variant is not base and not n and _refusals(variant, records, context):
            lines.append(f"{variant.label}: refused at context {context} (below)")
        if judged is not None:
            comp, eq = judged.comparison, judged.equivalence
            lines.append(verdict(variant.label, comp) + (f"; {eq.text()}" if eq else ""))
            if comp.testable:
                diff = f"{comp.diff:+.4f} [{comp.ci_low:+.4f}, {comp.ci_high:+.4f}]"
                p = f"{comp.p:.3g}" + (f" (Holm {comp.p_family:.3g})" if comp.p_family is not None else "") + \
                    f" {'paired' if comp.paired else 'Welch'}"
            else:
                diff = f"{comp.diff:+.4f} ({comp.no_test}: no test)"
        cells = [fmt_summary(Summary.of([_loss(r, c) for r in recs])) if _loss_any(recs, c) else
                 ("refused" if _refusals(variant, records, c) else "—") for c in contexts]
        rows.append([variant.label, str(n), ", ".join(map(str, trained)) or "—", *cells,
                     _signed(Summary.of([_rise(r, context) for r in recs])), diff, p])
    return markdown(header, rows), lines


def _signed(s: Summary | None) -> str:
    return "—" if s is None else f"{s.mean:+.4f}" + (f" ± {s.std:.4f}" if s.n > 1 else "")


def _loss_any(recs: list[dict[str, Any] | None], context: int) -> bool:
    return any(_loss(r, context) is not None for r in recs)


def _mean_curves(variant: Variant, records: dict[Path, dict[str, Any]]) -> dict[int, list[float]]:
    """Each context's loss by position, averaged over the variant's seeds that were scored there."""
    curves: dict[int, list[list[float]]] = {}
    for job in variant.jobs:
        for c, values in (records.get(job.job_dir) or {}).get("loss_by_position", {}).items():
            curves.setdefault(int(c), []).append(values)
    return {c: [sum(col) / len(col) for col in zip(*runs)] for c, runs in sorted(curves.items())}


def write_context_report(sweep_dir: Path, context: int, baseline: str | None = None, alpha: float = 0.05,
                         test: str = "paired", correction: str = "holm", margin: float | None = None,
                         effect: float | None = None) -> tuple[Path, Path]:
    """Writes context_report_<L>.md and loss_by_position.png into the sweep dir and returns both paths."""
    check_options(None, "minmax")
    check_verdict_options(test, correction)
    if context < 1:
        raise ConfigError(f"--context {context}: give a context length in tokens, e.g. --context 256.")
    jobs, _ = drop_repeats(load_sweep(sweep_dir))
    records = _records(jobs, sweep_dir)
    if not any(_loss(r, context) is not None for r in records.values()):
        scored = sorted({int(c) for r in records.values() for c in r["contexts"]})
        raise ConfigError(f"no job of {sweep_dir} has a loss at context {context} "
                          f"({'contexts scored: ' + str(scored) if scored else 'none was scored'}); run python "
                          f"src/eval.py ckpt_path={sweep_dir} contexts=[{context}] (add the trained context to "
                          f"compare with it), or pass --context with one of the scored lengths.")
    variants = group_variants(jobs)
    base = pick_baseline(variants, baseline)
    if not any(_loss(records.get(j.job_dir), context) is not None for j in base.jobs):
        why = _refusals(base, records, context)
        raise ConfigError(f"the baseline {base.label} has no loss at context {context} "
                          f"({why[0] if why else 'its jobs were not scored there'}); pass --baseline k=v naming "
                          "another variant: " + "; ".join(v.label for v in variants if v is not base) + ".")
    contexts = sorted({int(c) for r in records.values() for c in r["contexts"]})
    samples = [_sample(v, records, context) for v in variants]
    judged, found = judge_samples([v.label for v in variants], samples, variants.index(base), alpha, test,
                                  correction, margin)
    table, verdicts = _table(variants, records, contexts, context, base, judged, alpha)
    name = jobs[0].summary.get("name", "sweep")
    protocol = next(iter(records.values()))["protocol"]
    text = (f"# {name} at context {context}: {sweep_dir}\n\nEach job's checkpoint scored by src/eval.py on the same "
            f"validation targets at every context ({RESULTS_FILE} in its dir: {protocol}). "
            f"Baseline: {base.label}. Compared: the loss at context {context} of each seed. "
            f"`loss @ {context} − loss @ T`: per job, the same weights at {context} and at their "
            "trained context (negative: the longer context helps).\n\n")
    text += tests_paragraph([v.label for v in variants], judged, alpha)
    text += f"## Verdicts (loss at context {context} against the baseline)\n\n"
    text += "".join(f"- {line}\n" for line in verdicts) or "- nothing to compare\n"
    metric = f"loss at context {context}"
    text += "\n" + power_section(found, max(len(s.values) for s in samples), alpha, effect, metric)
    text += ranking([v.label for v in variants], judged, metric=metric)
    text += f"\n## Variants (mean ± std over seeds)\n\n{table}"
    refused = {v.label: _refusals(v, records, context) for v in variants}
    if any(refused.values()):
        text += f"\n## Refused at context {context}\n\n" + "".join(
            f"- {label}: {why[0]}\n" for label, why in refused.items() if why)
    unscored = [j.job_dir.name for j in jobs if j.job_dir not in records]
    if unscored:
        text += (f"\n## Not scored (no {RESULTS_FILE}; run src/eval.py ckpt_path={sweep_dir} contexts=[...])\n\n"
                 + "".join(f"- {n}\n" for n in unscored))
    text += jobs_section(jobs, sweep_dir)
    out = report_dir(sweep_dir)
    table_path, plot_path = out / f"context_report_{context}.md", out / "loss_by_position.png"
    text += f"\n![loss by position, one panel per variant, one curve per context]({plot_path.name})\n"
    atomic_write_text(table_path, text)
    panels = {v.label: (_mean_curves(v, records), min(r["trained_context"] for j in v.jobs
                        if (r := records.get(j.job_dir)))) for v in variants if _mean_curves(v, records)}
    plot_loss_by_position(panels, plot_path, f"{name}: loss by position, mean over seeds")
    return table_path, plot_path
