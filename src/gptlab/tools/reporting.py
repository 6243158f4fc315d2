"""Summarise a Hydra sweep: one row per job (what it changed, what it reached) and a val/loss plot."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from gptlab.atomic import atomic_write, atomic_write_text
from gptlab.errors import ConfigError
from gptlab.run_dir import SUMMARY_FILE, event_files


@dataclass
class JobResult:
    job_dir: Path
    overrides: dict[str, str]
    summary: dict
    val_curve: list[tuple[int, float]]  # (tokens seen, val/loss)


def _read_overrides(job_dir: Path) -> dict[str, str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    items = yaml.safe_load(path.read_text()) if path.exists() else []
    return dict(item.split("=", 1) for item in items or [] if "=" in item)


def _read_val_curve(job_dir: Path, tokens_per_step: int) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    by_step: dict[int, float] = {}  # a resumed job's later event file wins for a step logged twice
    for path in event_files(job_dir):
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        if "val/loss" in acc.Tags()["scalars"]:
            by_step.update({e.step: e.value for e in acc.Scalars("val/loss")})
    # Lightning logs the step index of the batch that triggered validation (0-based): +1 steps were done.
    return [((step + 1) * tokens_per_step, value) for step, value in sorted(by_step.items())]


def load_sweep(sweep_dir: Path) -> list[JobResult]:
    if not sweep_dir.is_dir():
        raise ConfigError(f"sweep dir {sweep_dir} does not exist; pass the dir a `-m` run printed.")
    jobs = []
    for job_dir in sorted((p for p in sweep_dir.iterdir() if p.is_dir()), key=lambda p: (len(p.name), p.name)):
        summary_path = job_dir / SUMMARY_FILE
        if not summary_path.exists():
            continue  # a job that failed or is still running: left out, and reported as missing
        summary = json.loads(summary_path.read_text())
        curve = _read_val_curve(job_dir, summary["tokens_per_step"])
        jobs.append(JobResult(job_dir, _read_overrides(job_dir), summary, curve))
    if not jobs:
        raise ConfigError(
            f"no finished job (with {SUMMARY_FILE}) under {sweep_dir}; is it a sweep dir of `train.py -m`?"
        )
    return jobs


def differing_keys(jobs: list[JobResult]) -> list[str]:
    keys = sorted({k for job in jobs for k in job.overrides})
    return [k for k in keys if len({job.overrides.get(k) for job in jobs}) > 1]


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def markdown_table(jobs: list[JobResult]) -> str:
    keys = differing_keys(jobs)
    header = ["job", *keys, "parameters", "best val/loss", "final val/loss", "tokens/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for job in jobs:
        s = job.summary
        row = [job.job_dir.name, *(job.overrides.get(k, "") for k in keys), f"{s['parameters']:,}",
               _fmt(s["best_val_loss"], ".4f"), _fmt(s["final_val_loss"], ".4f"), _fmt(s["tokens_per_sec"], ",.0f")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot_val_loss(jobs: list[JobResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display here or on cluster nodes
    import matplotlib.pyplot as plt

    keys = differing_keys(jobs)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for job in jobs:
        if job.val_curve:
            tokens, losses = zip(*job.val_curve)
            label = ", ".join(f"{k}={job.overrides.get(k, '')}" for k in keys) or job.job_dir.name
            ax.plot(tokens, losses, marker="o", label=label)
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("val/loss (nats per token)")
    ax.set_title(jobs[0].summary.get("name", "sweep"))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


def write_report(sweep_dir: Path) -> tuple[Path, Path]:
    jobs = load_sweep(sweep_dir)
    table_path, plot_path = sweep_dir / "ablation_report.md", sweep_dir / "val_loss.png"
    missing = [p.name for p in sweep_dir.iterdir()
               if p.is_dir() and not (p / SUMMARY_FILE).exists() and not p.name.startswith(".")]
    text = f"# {jobs[0].summary.get('name', 'sweep')}: {sweep_dir}\n\n" + markdown_table(jobs)
    if missing:
        text += f"\nJobs without a finished run (left out): {', '.join(sorted(missing))}\n"
    text += f"\n![val/loss against tokens]({plot_path.name})\n"
    atomic_write_text(table_path, text)
    plot_val_loss(jobs, plot_path)
    return table_path, plot_path
