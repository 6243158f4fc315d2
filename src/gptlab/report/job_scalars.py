"""A job's TensorBoard scalars in one pass over its event files: val/loss for the curves, train/loss for the
stability verdict (report.instability) and the stability probes for the mechanism plot (report.probe_plot)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from gptlab.report.logged_scalars import read_logged
from gptlab.runs.run_dir import event_files, steps_done_offset

ATTN_LOGIT_PREFIX = "x_probes/attn_logit_max/"  # one tag per layer (train.callbacks.stability)
Z_LOSS_TAG = "x_probes/z_loss"  # mean log² Z of the output logits


def report_tag(tag: str) -> bool:
    """The tags a report reads."""
    return tag in ("val/loss", "train/loss", Z_LOSS_TAG) or tag.startswith(ATTN_LOGIT_PREFIX)


def read_scalars(job_dir: Path, wanted: Callable[[str], bool] = report_tag
                 ) -> tuple[dict[str, dict[int, tuple[float, float]]], float | None]:
    """{tag: {optimizer steps done: (wall time, value)}} for the wanted tags, and the job's first event time; a
    resumed job's later event file wins for a step logged twice. A job without TensorBoard events is read from
    the other loggers it ran with (report.logged_scalars: logger=csv, mlflow, wandb)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = event_files(job_dir)
    if not files:
        return read_logged(job_dir, wanted)
    scalars: dict[str, dict[int, tuple[float, float]]] = {}
    start = None
    for path in files:
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        start = _first_event_time(acc) if start is None else start  # the job's first event: oldest file first
        offset = steps_done_offset(path)  # 1 for event files that log Lightning's step, one behind
        for tag in filter(wanted, acc.Tags()["scalars"]):
            scalars.setdefault(tag, {}).update({e.step + offset: (e.wall_time, e.value) for e in acc.Scalars(tag)})
    return scalars, start


def _first_event_time(acc) -> float | None:
    """The file's first event time; None for a file with no event in it (empty, or cut before its first one)."""
    try:
        return acc.FirstEventTimestamp()
    except ValueError:  # tensorboard's "No event timestamp could be found"
        return None


def series(scalars: dict[str, dict[int, tuple[float, float]]], tag: str) -> list[tuple[int, float]]:
    """(step, value) of one tag, in step order."""
    return [(step, value) for step, (_, value) in sorted(scalars.get(tag, {}).items())]


def probe_peaks(scalars: dict[str, dict[int, tuple[float, float]]]) -> tuple[float | None, float | None]:
    """The largest attention logit over every layer and probed step, and the largest |log Z| (the root of the
    z-loss probe's mean log² Z); None when the job ran without probes."""
    def peak(values: list[float]) -> float | None:  # a NaN probe (a diverging run) reads as infinite, not lost
        return None if not values else max(v if math.isfinite(v) else math.inf for v in values)

    logits = [v for tag, points in scalars.items() if tag.startswith(ATTN_LOGIT_PREFIX) for _, v in points.values()]
    z = peak([v for _, v in scalars.get(Z_LOSS_TAG, {}).values()])
    return peak(logits), (None if z is None else z ** 0.5)
