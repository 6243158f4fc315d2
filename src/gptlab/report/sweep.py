"""The report a sweep dir gets, chosen by what the sweep varies: a sweep over the learning rate gets the LR-tuned
report (lr_report), one over model sizes the scaling-ladder report (ladder_report), any other the ablation report
(runs). Kept apart from runs.py because the two special reports build on it."""

from __future__ import annotations

from pathlib import Path

from gptlab.errors import ConfigError
from gptlab.report.ladder_report import write_ladder_report
from gptlab.report.lr_report import write_lr_report
from gptlab.report.runs import check_options, differing_keys, drop_repeats, load_sweep, write_report


def write_sweep_report(sweep_dir: Path, baseline: str | None = None, alpha: float = 0.05, x: str | None = None,
                       band: str = "minmax", lr_key: str = "optimizer.lr", size_key: str = "+ladder",
                       target_flops: float | None = None, n_boot: int = 1000, test: str = "paired",
                       correction: str = "holm", margin: float | None = None,
                       effect: float | None = None) -> tuple[Path, Path]:
    """Writes the sweep's report (markdown) and its plot into the sweep dir and returns both paths."""
    check_options(x, band, alpha)
    jobs, _ = drop_repeats(load_sweep(sweep_dir))
    swept = differing_keys(jobs)
    if lr_key in swept and size_key in swept:
        raise ConfigError(f"this sweep varies both {lr_key} and {size_key}: a ladder's report takes one LR per "
                          f"ladder (tune the LR first, then run the ladder at each variant's best LR). To read this "
                          f"sweep as it is, pass --size-key none (an LR-tuned report, each size a variant) or "
                          f"--lr-key none (a ladder per LR).")
    if lr_key in swept:
        return write_lr_report(sweep_dir, jobs, lr_key, baseline, alpha)
    if size_key in swept:
        return write_ladder_report(sweep_dir, jobs, size_key, baseline, target_flops, n_boot)
    return write_report(sweep_dir, baseline, alpha, x, band, test, correction, margin, effect)
