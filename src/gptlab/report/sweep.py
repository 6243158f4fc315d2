"""The report a sweep dir gets, chosen by what the sweep varies: a sweep over the learning rate gets the LR-tuned
report (lr_report), one over model sizes the scaling-ladder report (ladder_report), any other the ablation report
(runs). Kept apart from runs.py because the two special reports build on it."""

from __future__ import annotations

import re
from pathlib import Path

from gptlab.errors import ConfigError
from gptlab.report.ladder_report import write_ladder_report
from gptlab.report.lr_report import write_lr_report
from gptlab.report.runs import SEED_KEY, check_options, differing_keys, drop_repeats, load_sweep, write_report

NO_KEY = "none"  # --lr-key none, --size-key none: no LR grid, no ladder
LR_NAME = re.compile(r"(?:^|_)lr$|learning_rate$")  # an optimizer's lr (optimizer.lr, +optimizer.muon_lr)


def check_axis_keys(lr_key: str, size_key: str) -> None:
    """An LR grid read off another key would report its values as learning rates (`--lr-key seed`: "3 learning
    rates (seed = 1, 2, 3)"), and seeds are what every verdict averages over, never a grid or a ladder."""
    for flag, key in (("--lr-key", lr_key), ("--size-key", size_key)):
        if key == SEED_KEY:
            raise ConfigError(f"{flag} {key}: the report averages over {SEED_KEY}, so it is never an LR grid or a "
                              f"ladder; pass e.g. {flag} {'optimizer.lr' if flag == '--lr-key' else '+ladder'}, or "
                              f"{flag} {NO_KEY}.")
    if lr_key != NO_KEY and not LR_NAME.search(lr_key.rsplit(".", 1)[-1]):
        raise ConfigError(f"--lr-key {lr_key}: {lr_key} is not a learning rate (its name does not end in lr), so its "
                          "values would be reported as one; pass the override that holds the LR grid, e.g. --lr-key "
                          f"optimizer.lr, or --lr-key {NO_KEY} for no LR grid.")


def check_ladder_options(size_key: str, test: str, correction: str, margin: float | None,
                         effect: float | None) -> None:
    """The ladder report's verdicts are compute multipliers with bootstrap intervals, not tests of a loss difference:
    the options that shape such a test would be ignored there, so they are refused."""
    given = [f"--margin {margin:g}" if margin is not None else "", f"--effect {effect:g}" if effect is not None else "",
             f"--test {test}" if test != "paired" else "", f"--correction {correction}" if correction != "holm" else ""]
    given = [g for g in given if g]
    if given:
        raise ConfigError(f"{' '.join(given)}: this sweep varies {size_key}, so it gets the scaling-ladder report, "
                          "whose verdicts are compute multipliers with bootstrap intervals, not tests of a loss "
                          "difference: " + ", ".join(f"drop {g.split()[0]}" for g in given) + f", or pass "
                          f"--size-key {NO_KEY} to read each size of each variant as an arm of an ablation report, "
                          "whose loss tests take them.")


def write_sweep_report(sweep_dir: Path, baseline: str | None = None, alpha: float = 0.05, x: str | None = None,
                       band: str = "minmax", lr_key: str = "optimizer.lr", size_key: str = "+ladder",
                       target_flops: float | None = None, n_boot: int = 1000, test: str = "paired",
                       correction: str = "holm", margin: float | None = None,
                       effect: float | None = None) -> tuple[Path, Path]:
    """Writes the sweep's report (markdown) and its plot into the sweep dir and returns both paths."""
    check_options(x, band)
    check_axis_keys(lr_key, size_key)
    jobs, _ = drop_repeats(load_sweep(sweep_dir))
    swept = differing_keys(jobs)
    if lr_key in swept and size_key in swept:
        raise ConfigError(f"this sweep varies both {lr_key} and {size_key}: a ladder's report takes one LR per "
                          f"ladder (tune the LR first, then run the ladder at each variant's best LR). To read this "
                          f"sweep as it is, pass --size-key none (an LR-tuned report, each size a variant) or "
                          f"--lr-key none (a ladder per LR).")
    if lr_key in swept:
        return write_lr_report(sweep_dir, jobs, lr_key, baseline, alpha, test, correction, margin, effect)
    if size_key in swept:
        check_ladder_options(size_key, test, correction, margin, effect)
        return write_ladder_report(sweep_dir, jobs, size_key, baseline, target_flops, n_boot)
    return write_report(sweep_dir, baseline, alpha, x, band, test, correction, margin, effect)
