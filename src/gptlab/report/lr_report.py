"""The LR-tuned ablation report: a sweep whose jobs differ in the learning rate as well as the variant and seed
(`optimizer.lr=1e-3,3e-3,1e-2`, or hparams_search=lr_grid) is read as one LR-sensitivity curve per variant, and the
verdicts compare each variant at its own best LR (gptlab.report.lr_tuning holds the statistics)."""

from __future__ import annotations

import math
from pathlib import Path

from gptlab.atomic import atomic_write, atomic_write_text
from gptlab.errors import ConfigError
from gptlab.report.lr_tuning import LrRun, TunedResult, lr_curve, tuned_comparison
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
    read_overrides,
)
from gptlab.report.stats import verdict
from gptlab.runs.sweep_failures import failed_jobs


def lr_runs(variants: list[Variant], lr_key: str) -> list[LrRun]:
    """The report's jobs as lr_tuning records; a job's seed is its `seed` override ('default' when not swept)."""
    runs = []
    for v in variants:
        for job in v.jobs:
            try:
                lr = float(job.overrides[lr_key])
            except (KeyError, ValueError):
                raise ConfigError(f"{job.job_dir}: {lr_key}={job.overrides.get(lr_key)!r} is not a number; an "
                                  f"LR-tuned report needs every job's {lr_key} override.") from None
            loss = None if job.summary.get("diverged") else job.summary.get("final_val_loss")
            runs.append(LrRun(v.label, lr, job.overrides.get(SEED_KEY, "default"), loss,
                              job.summary.get("final_val_bpb")))
    return runs


def diverged_jobs(sweep_dir: Path) -> list[JobResult]:
    """Jobs that diverged and left a failure record instead of a run summary: in an LR grid they are results
    (capped at L0), not missing jobs."""
    out = []
    for record in failed_jobs(sweep_dir):
        if record.get("kind") == "diverged":
            job_dir = sweep_dir / record["job"]
            summary = {"diverged": record.get("reason", "diverged"), "final_val_loss": None, "best_val_loss": None}
            out.append(JobResult(job_dir, read_overrides(job_dir), summary, []))
    return out


def init_loss(job: JobResult) -> float:
    """L0, the loss at initialization, as ln(vocabulary): the uniform prediction of a model whose initial logits
    are near 0 (N(0, 0.02) weights), which is what a diverged run is capped at."""
    return math.log(job_model(job.job_dir).padded_vocab_size)


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
            cells.append(cell)
        best = f"{res.best.lr:g}" + (f" (grid's {res.best.edge}: widen)" if res.best.edge else "")
        rows.append([v.label, *cells, *([best, f"{res.sensitivity:.4f}"] if metric == "loss" else [])])
    return markdown(header, rows)


def _seeds(seeds: tuple[str, ...]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}"


def write_lr_report(sweep_dir: Path, jobs: list[JobResult], lr_key: str, baseline: str | None,
                    alpha: float) -> tuple[Path, Path]:
    """Writes ablation_report.md and lr_sensitivity.png into the sweep dir."""
    table_path, plot_path = sweep_dir / "ablation_report.md", sweep_dir / "lr_sensitivity.png"
    diverged = diverged_jobs(sweep_dir)
    jobs = jobs + diverged
    variants = group_variants(jobs, axes=(SEED_KEY, lr_key))
    base = pick_baseline(variants, baseline)
    runs = lr_runs(variants, lr_key)
    cap = init_loss(jobs[0])
    split, results = tuned_comparison(runs, base.label, cap, alpha)
    grid = sorted({r.lr for r in runs})
    name = jobs[0].summary.get("name", "sweep")
    seeds = sorted({r.seed for r in runs}, key=lambda s: (len(s), s))
    text = f"# {name}: {sweep_dir} (LR-tuned)\n\n"
    text += (f"{len(jobs)} jobs: {len(variants)} variants × {len(grid)} learning rates ({lr_key} = "
             f"{', '.join(f'{lr:g}' for lr in grid)}) × seeds {', '.join(seeds)}. Baseline: {base.label}"
             f"{' (--baseline)' if baseline else ' (the first variant; --baseline k=v to choose)'}.\n\n")
    if split.disjoint:
        text += (f"Each variant's best LR is the one with the lowest mean final val/loss on "
                 f"{_seeds(split.select)}; the verdicts compare best against best on the other seeds, "
                 f"{', '.join(split.test)}, so the selection's luck does not carry into the test.\n\n")
    else:
        text += (f"Too few seeds to hold some out (3 or more are needed): the best LR is picked and tested on the "
                 f"same seeds, {', '.join(split.test)}. The verdicts are optimistic (the winner's curse): rerun "
                 f"with more seeds for a held-out test.\n\n")
    text += (f"LR sensitivity (Wortsman et al. 2023, \"Small-scale proxies for large-scale Transformer training "
             f"instabilities\"): the mean over the grid of min(L(lr), L0) − min over lr of L(lr), with L(lr) the "
             f"mean final val/loss over all seeds and L0 = ln(vocabulary) = {cap:.4f} the loss at initialization, "
             f"the value a diverged run counts as. Lower: more robust to the LR.\n\n")
    text += f"## Verdicts (each variant at its own best LR, final val/loss on seeds {', '.join(split.test)})\n\n"
    lines = []
    for res in results:
        head = f"NOT an optimum: {res.best.widen}" if res.best.widen else f"best LR {res.best.lr:g}"
        if res.comparison is None:
            lines.append(f"{res.variant} (baseline): {head}")
        else:
            lines.append(f"{verdict(res.variant, res.comparison)}; {head}")
    text += "".join(f"- {line}\n" for line in lines)
    text += "\n## Final val/loss against LR (mean ± std over all seeds)\n\n"
    text += _lr_table(variants, runs, results, "loss")
    if any(r.bpb is not None for r in runs):
        text += "\n## Final val bpb against LR (mean ± std over all seeds)\n\n"
        text += _lr_table(variants, runs, results, "bpb")
    text += jobs_section(jobs, sweep_dir, {j.job_dir.name for j in diverged})
    text += f"\n![final val/loss against the learning rate, ±1 std over seeds]({plot_path.name})\n"
    atomic_write_text(table_path, text)
    plot_lr_curves(runs, results, cap, name, plot_path)
    return table_path, plot_path


def plot_lr_curves(runs: list[LrRun], results: list[TunedResult], cap: float, title: str, path: Path) -> None:
    """Mean ± std of final val/loss against the LR (log axis) per variant, the best LR starred (hollow when it
    sits at the grid's edge), diverged runs as crosses at L0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = plt.get_cmap("tab10")
    for i, res in enumerate(results):
        colour = colours(i % 10)
        curve = [p for p in lr_curve([r for r in runs if r.variant == res.variant]) if p.loss is not None]
        ax.errorbar([p.lr for p in curve], [p.loss.mean for p in curve], yerr=[p.loss.std for p in curve],
                    marker="o", capsize=3, color=colour, label=f"{res.variant} (sensitivity {res.sensitivity:.3f})")
        best = next((p for p in curve if p.lr == res.best.lr), None)
        if best is not None:
            ax.plot([best.lr], [best.loss.mean], marker="*", markersize=16, color=colour,
                    markerfacecolor="none" if res.best.edge else colour)
        diverged = [r.lr for r in runs if r.variant == res.variant and r.diverged]
        if diverged:
            ax.plot(diverged, [cap] * len(diverged), "x", color=colour, markersize=9)
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final val/loss (nats per token)")
    ax.set_title(f"{title}: LR sensitivity (★ best LR; hollow ★: grid edge)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
