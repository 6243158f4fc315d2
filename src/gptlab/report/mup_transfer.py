"""muP's learning-rate transfer, read from a finished sweep over model.parametrization × model.n_embd ×
optimizer.lr (experiment=mup_transfer): per parametrization and width the final val loss against LR, each best LR,
and how many grid steps it lies from the narrowest width's best. muP's promise (Tensor Programs V): the best LR of
the narrow proxy is the best LR of the wide model, within one grid step; under the standard parametrization it
drifts down as the width grows. Losses, seeds and diverged runs are read as the LR-tuned report reads them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gptlab.atomic import atomic_write
from gptlab.errors import ConfigError
from gptlab.report.lr_report import common_cap, diverged_jobs
from gptlab.report.lr_tuning import LrRun, grid_losses
from gptlab.report.runs import SEED_KEY, JobResult, load_sweep

KEYS = ("model.parametrization", "model.n_embd", "optimizer.lr")


@dataclass(frozen=True)
class WidthCurve:
    parametrization: str
    width: int
    losses: dict[float, float]  # lr -> mean capped final val loss over seeds

    @property
    def best_lr(self) -> float:
        return min(self.losses, key=self.losses.__getitem__)


def _job_key(job: JobResult) -> tuple[str, int, float]:
    missing = [k for k in KEYS if k not in job.overrides]
    if missing:
        raise ConfigError(f"{job.job_dir}: the sweep does not vary {', '.join(missing)}; the transfer report needs "
                          f"jobs over {', '.join(KEYS)}: pass the dir that "
                          "`python src/train.py -m experiment=mup_transfer` printed.")
    return job.overrides[KEYS[0]], int(job.overrides[KEYS[1]]), float(job.overrides[KEYS[2]])


def width_curves(sweep_dir: Path) -> list[WidthCurve]:
    """One curve per (parametrization, width); a diverged job counts at the measured initial loss (lr_report's cap
    for a run without its own: the others' mean, else ln(vocabulary))."""
    jobs = load_sweep(sweep_dir)
    cap, _ = common_cap(jobs)
    runs: dict[tuple[str, int], list[LrRun]] = {}
    for job in jobs + diverged_jobs(sweep_dir):
        param, width, lr = _job_key(job)
        loss = None if job.summary.get("diverged") else job.summary.get("final_val_loss")
        runs.setdefault((param, width), []).append(LrRun(param, lr, job.overrides.get(SEED_KEY, "default"), loss))
    return [WidthCurve(p, w, grid_losses(r, cap)) for (p, w), r in sorted(runs.items())]


def grid_steps(curves: list[WidthCurve]) -> dict[tuple[str, int], int]:
    """Per curve, the signed number of grid steps from its parametrization's narrowest width's best LR."""
    out = {}
    for curve in curves:
        grid = sorted(curve.losses)
        narrowest = min((c for c in curves if c.parametrization == curve.parametrization), key=lambda c: c.width)
        out[(curve.parametrization, curve.width)] = grid.index(curve.best_lr) - grid.index(narrowest.best_lr)
    return out


def transfer_table(curves: list[WidthCurve]) -> str:
    """A markdown table: a row per parametrization and width, the loss at each LR (best in bold), the best LR and
    its distance in grid steps from the narrowest width's."""
    grid = sorted({lr for c in curves for lr in c.losses})
    steps = grid_steps(curves)
    lines = ["| parametrization | n_embd | " + " | ".join(f"lr={lr:g}" for lr in grid) + " | best LR | steps |",
             "|---|---|" + "---|" * (len(grid) + 2)]
    for c in curves:
        cells = [(f"**{c.losses[lr]:.4f}**" if lr == c.best_lr else f"{c.losses[lr]:.4f}") if lr in c.losses
                 else "–" for lr in grid]
        lines.append(f"| {c.parametrization} | {c.width} | " + " | ".join(cells)
                     + f" | {c.best_lr:g} | {steps[(c.parametrization, c.width)]:+d} |")
    return "\n".join(lines)


def plot_transfer(curves: list[WidthCurve], path: Path) -> None:
    """One panel per parametrization: final val loss against LR (log), a line per width, its best LR marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = sorted({c.parametrization for c in curves}, key=lambda p: p != "standard")
    fig, axes = plt.subplots(1, len(params), figsize=(5.5 * len(params), 4.2), sharey=True, squeeze=False)
    for ax, param in zip(axes[0], params):
        for c in (c for c in curves if c.parametrization == param):
            lrs = sorted(c.losses)
            line, = ax.plot(lrs, [c.losses[lr] for lr in lrs], marker="o", label=f"n_embd={c.width}")
            ax.plot([c.best_lr], [c.losses[c.best_lr]], marker="*", markersize=16, color=line.get_color())
        ax.set(xscale="log", xlabel="optimizer.lr", title=f"model.parametrization={param}")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("final val loss (★ = best LR)")
    low = min(v for c in curves for v in c.losses.values())
    axes[0][0].set_ylim(low - 0.05, min(max(v for c in curves for v in c.losses.values()), low + 1.5))
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)


def transfer_verdicts(curves: list[WidthCurve]) -> list[str]:
    """Per parametrization, one line: each width's best LR and whether it stays within one grid step."""
    steps, lines = grid_steps(curves), []
    for param in sorted({c.parametrization for c in curves}):
        mine = sorted((c for c in curves if c.parametrization == param), key=lambda c: c.width)
        worst = max(abs(steps[(param, c.width)]) for c in mine)
        bests = ", ".join(f"{c.best_lr:g} at {c.width}" for c in mine)
        word = "transfers (within one grid step)" if worst <= 1 else f"drifts ({worst} grid steps)"
        lines.append(f"{param}: best LR {bests}: {word}")
    return lines

