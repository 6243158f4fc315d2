"""The LR-tuned ablation report: a sweep whose jobs differ in the learning rate as well as the variant and seed
(`optimizer.lr=1e-3,3e-3,1e-2`, or hparams_search=lr_grid) is read as one LR-sensitivity curve per variant, and the
verdicts compare each variant at its own best LR (gptlab.report.lr_tuning holds the statistics,
gptlab.report.seed_bootstrap their intervals over seeds, gptlab.report.probe_plot the mechanism plot)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from gptlab.atomic import atomic_write, atomic_write_text
from gptlab.errors import ConfigError
from gptlab.report.lr_tuning import GRID_EDGE, LrRun, SeedSplit, TunedResult, lr_curve, tuned_comparison
from gptlab.report.membership import screen
from gptlab.report.output_dir import report_dir
from gptlab.report.probe_plot import ATTN_LOGIT_DIVERGENCE, SOURCE, ProbePoint, crossed, plot_probes
from gptlab.report.runs import (
    SEED_KEY,
    JobResult,
    Variant,
    fmt_summary,
    group_variants,
    job_model,
    jobs_section,
    markdown,
    pick_baseline,
    read_job,
    read_overrides,
    stability_note,
)
from gptlab.report.seed_bootstrap import Interval, VariantIntervals, lr_intervals
from gptlab.report.stats import verdict
from gptlab.report.verdict_text import power_section, ranking, tests_paragraph
from gptlab.report.verdicts import job_paired
from gptlab.runs.run_dir import FAILURE_FILE, RESOLVED_CONFIG

N_BOOT = 1000


def lr_value(job: JobResult, lr_key: str) -> float:
    try:
        return float(job.overrides[lr_key])
    except (KeyError, ValueError):
        raise ConfigError(f"{job.job_dir}: {lr_key}={job.overrides.get(lr_key)!r} is not a number; an "
                          f"LR-tuned report needs every job's {lr_key} override: move its job dir out of the sweep "
                          "dir to report without it.") from None


def lr_runs(variants: list[Variant], lr_key: str) -> list[LrRun]:
    """The report's jobs as lr_tuning records; a job's seed is its `seed` override ('default' when not swept), its
    cap its measured initial loss when that was logged at the first step."""
    runs = []
    for v in variants:
        for job in v.jobs:
            st = job.stability
            loss = None if job.summary.get("diverged") or st.kind == "diverged" else job.summary.get("final_val_loss")
            runs.append(LrRun(v.label, lr_value(job, lr_key), job.overrides.get(SEED_KEY, "default"), loss,
                              job.summary.get("final_val_bpb"), st.initial if st.at_init else None, st.kind,
                              job_paired(job)))
    return runs


def diverged_jobs(sweep_dir: Path) -> list[JobResult]:
    """Jobs of the sweep that diverged and left a failure record instead of a run summary: in an LR grid they are
    results (capped at their initial loss), not missing jobs."""
    import json

    out = []
    for job_dir in screen(sweep_dir).members:
        path = job_dir / FAILURE_FILE
        if not path.is_file():
            continue
        record = json.loads(path.read_text())
        if record.get("kind") == "diverged":
            summary = {"diverged": record.get("reason", "diverged"), "final_val_loss": None, "best_val_loss": None}
            out.append(read_job(job_dir, read_overrides(job_dir), summary))
    return out


def common_cap(jobs: list[JobResult]) -> tuple[float, str]:
    """The cap of a run without a measured initial loss: the mean of the others' measured ones, else ln(vocab)."""
    measured = [j.stability.initial for j in jobs if j.stability.at_init]
    if measured:
        return float(np.mean(measured)), f"the mean measured initial loss of the other jobs, {np.mean(measured):.4f}"
    readable = next((j for j in jobs if j.cost is not None), None)
    if readable is None:
        raise ConfigError(f"no job's model is readable ({jobs[0].cost_error}): with no initial train/loss measured, "
                          f"the LR report caps a diverged run at ln(vocabulary), which needs a job's model; restore "
                          f"the jobs' {RESOLVED_CONFIG}.")
    value = math.log(job_model(readable.job_dir).padded_vocab_size)
    return value, (f"ln(vocabulary) = {value:.4f}, the uniform prediction (no job logged its train/loss at the "
                   f"first step: set trainer.log_every_n_steps=1 to measure it)")


def _lr_table(variants: list[Variant], runs: list[LrRun], results: list[TunedResult], metric: str) -> str:
    grid = sorted({r.lr for r in runs})
    # The best LR and the sensitivity are of the loss: stated once, in the loss table.
    header = ["variant", *(f"lr={lr:g}" for lr in grid)] + (["best LR (selection seeds)", "LR sensitivity"]
                                                             if metric == "loss" else [])
    rows = []
    for v, res in zip(variants, results):
        points = {p.lr: p for p in lr_curve([r for r in runs if r.variant == v.label])}
        cells = []
        for lr in grid:
            p = points.get(lr)
            s = None if p is None else (p.loss if metric == "loss" else p.bpb)
            cell = fmt_summary(s)
            if p is not None and p.diverged:
                cell += f" ({p.diverged} diverged)"
            if p is not None and p.unstable:
                cell += f" ({p.unstable} unstable)"
            cells.append(cell)
        best = f"{res.best.lr:g}" + (f" (grid's {res.best.edge}: widen)" if res.best.edge else "")
        rows.append([v.label, *cells, *([best, f"{res.sensitivity:.4f}{_unstable_note(runs, v.label)}"]
                                        if metric == "loss" else [])])
    return markdown(header, rows)


def _unstable_note(runs: list[LrRun], variant: str) -> str:
    """`; unstable at lr=0.1` for the LRs where a run of the variant was unstable or diverged."""
    bad = sorted({r.lr for r in runs if r.variant == variant and (r.stability == "unstable" or r.diverged)})
    return f"; unstable at lr={', '.join(f'{lr:g}' for lr in bad)}" if bad else ""


def _diff_cell(iv: Interval | None) -> str:
    if iv is None:
        return "baseline"
    return iv.text("+.4f") + (": no difference found" if iv.spans_zero else "")


def _interval_table(variants: list[Variant], runs: list[LrRun], ivs: dict[str, VariantIntervals]) -> str:
    header = ["variant", "LR sensitivity [95%]", "Δ sensitivity vs baseline [95%]",
              "excess over the sweep's best [95%]", "Δ excess vs baseline [95%]", "best LR, all seeds [95%]",
              "unstable or diverged at"]
    rows = []
    for v in variants:
        iv = ivs[v.label]
        bad = _unstable_note(runs, v.label).removeprefix("; unstable at ") or "—"
        rows.append([v.label, iv.sensitivity.text(), _diff_cell(iv.d_sensitivity), iv.excess.text(),
                     _diff_cell(iv.d_excess), f"{iv.best_lr.value:g} [{iv.best_lr.low:g}, {iv.best_lr.high:g}]", bad])
    return markdown(header, rows)


def _seeds(seeds: tuple[str, ...]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}"


def _verdict_line(res: TunedResult, base: str) -> str:
    head = f"NOT an optimum: {res.best.widen}" if res.best.widen else f"best LR {res.best.lr:g}"
    if res.variant == base:
        return f"{res.variant} (baseline): {head}"
    if res.comparison is None:
        return f"{res.variant}: no finished run at its best LR on the test seeds, or none of the baseline's; {head}"
    if res.comparison.no_test == GRID_EDGE:
        return f"{res.variant}: {res.comparison.diff:+.3f}, {GRID_EDGE} (no p-value); {head}"
    eq = res.verdict.equivalence
    return f"{verdict(res.variant, res.comparison)}" + (f"; {eq.text()}" if eq else "") + f"; {head}"


def probe_points(variants: list[Variant], lr_key: str) -> list[ProbePoint]:
    return [ProbePoint(v.label, lr_value(j, lr_key), j.job_dir.name, j.attn_logit_max, j.log_z_max)
            for v in variants for j in v.jobs if j.attn_logit_max is not None or j.log_z_max is not None]


def _probe_section(points: list[ProbePoint], title: str, path: Path) -> str:
    text = "\n## Mechanism: stability probes against the LR\n\n"
    if not points:
        return text + ("No job carries stability probes (x_probes/* in TensorBoard; callbacks.stability_probes=null "
                       "turns them off): the attention-logit plot is skipped.\n")
    plot_probes(points, title, path)
    over = crossed(points)
    text += (f"Largest attention logit and largest |log Z| of the output logits each job's probes saw. Level of "
             f"divergence: attention logits of {ATTN_LOGIT_DIVERGENCE:.0e}, the order {SOURCE} report for diverging "
             f"runs. ")
    if over:
        text += "Crossed it: " + "; ".join(f"{p.variant}, lr={p.lr:g} (job {p.job}: {p.attn_logit_max:,.0f})"
                                           for p in over) + ".\n"
    else:
        text += "No run crossed it.\n"
    header = ["variant", "lr", "job", "largest attention logit", "largest |log Z|"]
    rows = [[p.variant, f"{p.lr:g}", p.job, "—" if p.attn_logit_max is None else f"{p.attn_logit_max:,.1f}",
             "—" if p.log_z_max is None else f"{p.log_z_max:.3f}"] for p in sorted(points, key=lambda p: (
                 p.variant, p.lr, len(p.job), p.job))]
    return text + "\n" + markdown(header, rows) + f"\n![stability probes against the LR]({path.name})\n"


def _method(split: SeedSplit, cap_text: str) -> str:
    """How the best LRs are picked and tested, and what LR sensitivity is."""
    if split.disjoint:
        text = (f"Each variant's best LR is the one with the lowest mean final val/loss on "
                f"{_seeds(split.select)}; the verdicts compare best against best on the other seeds, "
                f"{', '.join(split.test)}, so the selection's luck does not carry into the test. Under one seed "
                f"two variants share their data order and the initial weights of the tensors both have, whatever "
                f"their LRs, so the test pairs seeds as the ablation report does.\n\n")
    else:
        text = (f"Too few seeds to hold some out (3 or more are needed): the best LR is picked and tested on the "
                f"same seeds, {', '.join(split.test)}. The verdicts are optimistic (the winner's curse): rerun "
                f"with more seeds for a held-out test.\n\n")
    text += (f"LR sensitivity (Wortsman et al. 2023, \"Small-scale proxies for large-scale Transformer training "
             f"instabilities\"): the mean over the grid of min(L(lr), L0) − min over lr of L(lr), with L(lr) the "
             f"mean final val/loss over all seeds and L0 each run's measured initial loss (its first train/loss, "
             f"logged at the first step), the value a diverged run counts as; a run without one is capped at "
             f"{cap_text}. Lower: more robust to the LR. Each variant is measured against its own best, so a variant "
             f"better at every LR can still score as more sensitive: the excess over the sweep's best (mean over the "
             f"grid of min(L(lr), L0) − the lowest L of any variant at any LR) measures all against one "
             f"reference. Intervals: {N_BOOT} bootstrap resamples of each variant's seeds, 95%; a difference whose "
             f"interval spans 0 is reported as no difference found. A comparison where either best LR sits at the "
             f"grid's edge gets no p-value: that optimum is not bracketed.\n\n")
    return text


def write_lr_report(sweep_dir: Path, jobs: list[JobResult], lr_key: str, baseline: str | None, alpha: float,
                    test: str = "paired", correction: str = "holm", margin: float | None = None,
                    effect: float | None = None) -> tuple[Path, Path]:
    """Writes ablation_report.md, lr_sensitivity.png and (when the jobs carry probes) lr_probes.png."""
    out = report_dir(sweep_dir)
    table_path, plot_path = out / "ablation_report.md", out / "lr_sensitivity.png"
    diverged = diverged_jobs(sweep_dir)
    jobs = jobs + diverged
    variants = group_variants(jobs, axes=(SEED_KEY, lr_key))
    base = pick_baseline(variants, baseline)
    runs = lr_runs(variants, lr_key)
    cap, cap_text = common_cap(jobs)
    split, results, found = tuned_comparison(runs, base.label, cap, alpha, test, correction, margin)
    ivs = lr_intervals(runs, base.label, cap, N_BOOT)
    grid = sorted({r.lr for r in runs})
    name = jobs[0].summary.get("name", "sweep")
    seeds = sorted({r.seed for r in runs}, key=lambda s: (len(s), s))
    text = f"# {name}: {sweep_dir} (LR-tuned)\n\n"
    text += (f"{len(jobs)} jobs: {len(variants)} variants × {len(grid)} learning rates ({lr_key} = "
             f"{', '.join(f'{lr:g}' for lr in grid)}) × seeds {', '.join(seeds)}. Baseline: {base.label}"
             f"{' (--baseline)' if baseline else ' (the first variant; --baseline k=v to choose)'}.\n\n")
    text += _method(split, cap_text)
    text += tests_paragraph([r.variant for r in results], [r.verdict for r in results], alpha)
    text += stability_note(jobs)
    text += f"## Verdicts (each variant at its own best LR, final val/loss on seeds {', '.join(split.test)})\n\n"
    text += "".join(f"- {_verdict_line(res, base.label)}\n" for res in results)
    for v in variants:
        d = ivs[v.label].d_sensitivity
        if d is not None:
            word = "no difference found" if d.spans_zero else ("more robust" if d.value < 0 else "more sensitive")
            text += f"- LR sensitivity of {v.label} − the baseline's: {d.text('+.4f')} (95% bootstrap): {word}\n"
    text += ("\n" + power_section(found, len(split.test), alpha, effect)
             + "Here the seeds per arm are test seeds: as many again pick each variant's best LR.\n\n"
             * split.disjoint)
    text += ranking([r.variant for r in results], [r.verdict for r in results])
    text += "\n## Final val/loss against LR (mean ± std over all seeds)\n\n"
    text += _lr_table(variants, runs, results, "loss")
    if any(r.bpb is not None for r in runs):
        text += "\n## Final val bpb against LR (mean ± std over all seeds)\n\n"
        text += _lr_table(variants, runs, results, "bpb")
    text += "\n## LR sensitivity and best LR, with 95% intervals over seeds\n\n"
    text += _interval_table(variants, runs, ivs)
    text += _probe_section(probe_points(variants, lr_key), name, out / "lr_probes.png")
    text += jobs_section(jobs, sweep_dir, {j.job_dir.name for j in diverged})
    text += (f"\n![final val/loss against the learning rate, ±1 std over seeds; red rings: unstable runs]"
             f"({plot_path.name})\n")
    atomic_write_text(table_path, text)
    plot_lr_curves(runs, results, cap, name, plot_path)
    return table_path, plot_path


def plot_lr_curves(runs: list[LrRun], results: list[TunedResult], cap: float, title: str, path: Path) -> None:
    """Mean ± std of final val/loss against the LR (log axis) per variant, the best LR starred (hollow when it
    sits at the grid's edge), unstable runs ringed in red, diverged runs as crosses at their cap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = plt.get_cmap("tab10")
    ringed = False
    for i, res in enumerate(results):
        colour = colours(i % 10)
        curve = [p for p in lr_curve([r for r in runs if r.variant == res.variant]) if p.loss is not None]
        ax.errorbar([p.lr for p in curve], [p.loss.mean for p in curve], yerr=[p.loss.std for p in curve],
                    marker="o", capsize=3, color=colour, label=f"{res.variant} (sensitivity {res.sensitivity:.3f})")
        best = next((p for p in curve if p.lr == res.best.lr), None)
        if best is not None:
            ax.plot([best.lr], [best.loss.mean], marker="*", markersize=16, color=colour,
                    markerfacecolor="none" if res.best.edge else colour)
        unstable = [r for r in runs if r.variant == res.variant and r.stability == "unstable" and not r.diverged]
        if unstable:
            ax.plot([r.lr for r in unstable], [r.loss for r in unstable], "o", markersize=14, markerfacecolor="none",
                    markeredgecolor="red", markeredgewidth=1.5, label=None if ringed else "unstable run")
            ringed = True
        diverged = [r for r in runs if r.variant == res.variant and r.diverged]
        if diverged:
            ax.plot([r.lr for r in diverged], [cap if r.init is None else r.init for r in diverged], "x",
                    color=colour, markersize=9)
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final val/loss (nats per token)")
    ax.set_title(f"{title}: LR sensitivity (★ best LR; hollow ★: grid edge; ✕ diverged)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
