"""The scaling-ladder report: a sweep whose jobs differ in model size (`+ladder=w16,w24,...`, experiment=
ladder_gpt2_to_llama) as well as the variant and seed is read as one L(C) law per variant, and each variant's
compute multiplier against the baseline (gptlab.report.ladder_fit holds the statistics)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gptlab.atomic import atomic_write, atomic_write_text
from gptlab.errors import ConfigError
from gptlab.report.ladder_fit import (
    FAR,
    PowerLaw,
    Rung,
    bootstrap_band,
    bootstrap_multipliers,
    far_extrapolation,
    fit_rungs,
)
from gptlab.report.output_dir import report_dir
from gptlab.report.runs import (
    SEED_KEY,
    JobResult,
    Variant,
    fmt_summary,
    group_variants,
    jobs_section,
    markdown,
    pick_baseline,
)
from gptlab.report.stats import Summary
from gptlab.runs.run_dir import RESOLVED_CONFIG


def rungs_of(variant: Variant, size_key: str) -> list[Rung]:
    """A variant's jobs as rungs, smallest compute first; compute = tokens seen × training FLOPs per token."""
    by_size: dict[str, list[JobResult]] = {}
    for job in variant.jobs:
        by_size.setdefault(job.overrides[size_key], []).append(job)
    rungs = []
    for size, jobs in by_size.items():
        unreadable = next((j for j in jobs if j.cost is None), None)
        if unreadable is not None:
            raise ConfigError(f"ladder size {size} of {variant.label}: the model of job {unreadable.job_dir} is "
                              f"unreadable ({unreadable.cost_error}); the ladder needs its FLOPs: restore its "
                              f"{RESOLVED_CONFIG}, or move its job dir out of the sweep dir to fit without it.")
        finished = {j.overrides.get(SEED_KEY, "default"): j.summary["final_val_loss"] for j in jobs
                    if j.summary.get("final_val_loss") is not None}
        if not finished:
            continue
        compute = float(np.mean([j.tokens_seen * j.cost.flops_per_token for j in jobs]))
        rungs.append(Rung(size, compute, finished))
    return sorted(rungs, key=lambda r: r.compute)


def _fmt_m(value: float) -> str:
    return "∞" if np.isinf(value) else "—" if np.isnan(value) else f"{value:.3g}x"


def write_ladder_report(sweep_dir: Path, jobs: list[JobResult], size_key: str, baseline: str | None,
                        target: float | None, n_boot: int = 1000) -> tuple[Path, Path]:
    """Writes ablation_report.md and scaling_ladder.png into the sweep dir."""
    out = report_dir(sweep_dir)
    table_path, plot_path = out / "ablation_report.md", out / "scaling_ladder.png"
    variants = group_variants(jobs, axes=(SEED_KEY, size_key))
    base = pick_baseline(variants, baseline)
    rungs = {v.label: rungs_of(v, size_key) for v in variants}
    short = [label for label, r in rungs.items() if len(r) < 3]
    if short:
        raise ConfigError(f"{', '.join(short)}: a ladder needs at least 3 sizes with a finished job to fit "
                          f"L(C) = E + A·C^-alpha (4 or more to check it); add sizes with {size_key}=....")
    laws = {label: fit_rungs(r) for label, r in rungs.items()}
    largest = max(r[-1].compute for r in rungs.values())
    target = FAR * largest if target is None else target
    far = far_extrapolation(target, largest)
    name = jobs[0].summary.get("name", "sweep")
    sizes = [r.size for r in rungs[base.label]]
    seeds = sorted({s for r in rungs.values() for rung in r for s in rung.losses}, key=lambda s: (len(s), s))
    text = f"# {name}: {sweep_dir} (scaling ladder)\n\n"
    text += (f"{len(jobs)} jobs: {len(variants)} variants × sizes {', '.join(sizes)} ({size_key}) × seeds "
             f"{', '.join(seeds)}. Baseline: {base.label}"
             f"{' (--baseline)' if baseline else ' (the first variant; --baseline k=v to choose)'}.\n\n")
    text += ("Each variant's final val/loss (mean over seeds per size) is fitted by L(C) = E + A·(C/C0)^(−α) "
             "(scipy curve_fit, 0 ≤ E < min loss, 0 < α ≤ 3), C = training FLOPs = tokens seen × FLOPs per token "
             "(3 × forward), C0 the smallest rung's. Compute multiplier m(C) = C_b / C with L_b(C_b) = L_v(C): the "
             "compute the baseline needs to reach the variant's loss at C, over C (m > 1: the variant is worth m× "
             f"compute). 95% intervals: {n_boot} bootstrap resamples of each size's seeds, both laws refitted.\n\n")
    text += "## Fits\n\n" + markdown(["variant", "E", "A", "α", "C0 (FLOPs)"], [
        [label, f"{law.e:.4f}", f"{law.a:.4f}", f"{law.alpha:.4f}", f"{law.c_ref:.3g}"] for label, law in laws.items()])
    text += "\n## Final val/loss per size (mean ± std over seeds)\n\n" + _loss_table(variants, rungs, laws, size_key)
    text += f"\n## Compute multiplier against {base.label} (95% bootstrap interval)\n\n"
    mult_rows = _multiplier_rows(variants, base, rungs, target, far, n_boot)
    text += markdown(["variant", "at", "FLOPs", "multiplier", "95% interval"], mult_rows)
    if any("∞" in cell for row in mult_rows for cell in row):
        floor = laws[base.label].e
        text += (f"\n∞: the variant's loss there lies below the baseline's fitted floor E_b = {floor:.4f}, "
                 f"which no compute reaches on the baseline's law; read it as \"more than any finite multiplier the "
                 f"ladder can state\", and check E_b's fit (more or bigger rungs pin it down).\n")
    text += (f"\nThe target is {target:.3g} FLOPs ({target / largest:.3g}x the largest rung; --target-flops to set "
             f"it). Beyond {FAR:g}x the largest rung a number is marked EXTRAPOLATED: the fit has no evidence there.\n")
    text += jobs_section(jobs, sweep_dir)
    text += f"\n![final val/loss against training FLOPs, fits with 95% bootstrap bands]({plot_path.name})\n"
    atomic_write_text(table_path, text)
    plot_ladder(rungs, laws, target, name, plot_path)
    return table_path, plot_path


def _loss_table(variants: list[Variant], rungs: dict[str, list[Rung]], laws: dict[str, PowerLaw], size_key: str) -> str:
    rows = []
    for v in variants:
        for rung in rungs[v.label]:
            job = next(j for j in v.jobs if j.overrides[size_key] == rung.size)
            rows.append([v.label, rung.size, f"{job.cost.non_embedding:,}", f"{job.tokens_seen:,}",
                         f"{rung.compute:.3g}", fmt_summary(Summary.of(list(rung.losses.values()))),
                         f"{float(laws[v.label].loss(rung.compute)):.4f}"])
    return markdown(["variant", "size", "non-embedding params", "tokens", "FLOPs", "final val/loss", "fit"], rows)


def _multiplier_rows(variants: list[Variant], base: Variant, rungs: dict[str, list[Rung]], target: float, far: str,
                     n_boot: int) -> list[list[str]]:
    """Each variant's multiplier against the baseline at its own rungs and at the target, with its interval."""
    rows = []
    for v in variants:
        if v is base:
            continue
        at = [r.compute for r in rungs[v.label]] + [target]
        intervals = bootstrap_multipliers(rungs[base.label], rungs[v.label], at, n_boot=n_boot)
        for i, (c, iv) in enumerate(zip(at, intervals)):
            where = rungs[v.label][i].size if i < len(at) - 1 else f"target{' — ' + far if far else ''}"
            failed = f" ({iv.failed} of {n_boot} resamples did not fit)" if iv.failed else ""
            same = ": no difference found (spans 1)" if iv.low <= 1 <= iv.high else ""
            interval = f"[{_fmt_m(iv.low)}, {_fmt_m(iv.high)}]{same}{failed}"
            rows.append([v.label, where, f"{c:.3g}", _fmt_m(iv.point), interval])
    return rows


def plot_ladder(rungs: dict[str, list[Rung]], laws: dict[str, PowerLaw], target: float, title: str,
                path: Path) -> None:
    """Each seed's final loss against FLOPs (log x), each variant's fit to the target with its bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = plt.get_cmap("tab10")
    lo = min(r[0].compute for r in rungs.values())
    grid = np.geomspace(lo, target, 100)
    for i, (label, rs) in enumerate(rungs.items()):
        colour = colours(i % 10)
        xs = [r.compute for r in rs for _ in r.losses]
        ys = [loss for r in rs for loss in r.losses.values()]
        ax.scatter(xs, ys, color=colour, s=14, alpha=0.7)
        law = laws[label]
        ax.plot(grid, law.loss(grid), color=colour,
                label=f"{label}: {law.e:.2f} + {law.a:.2f}·(C/C0)^-{law.alpha:.2f}")
        low, high = bootstrap_band(rs, grid)
        ax.fill_between(grid, low, high, color=colour, alpha=0.15, linewidth=0)
    largest = max(r[-1].compute for r in rungs.values())
    ax.axvline(largest, color="grey", linestyle=":", linewidth=1, label="largest rung")
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("final val/loss (nats per token)")
    ax.set_title(f"{title}: scaling ladder, fits with 95% seed-bootstrap bands")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
