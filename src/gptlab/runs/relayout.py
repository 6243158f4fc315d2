"""Lightning's loop counters of a checkpoint moved to another batch layout, when a run resumes on another number of
ranks (or micro-batch, or accumulation) with the same global batch.

Lightning counts an epoch's batches per rank in micro-batches of the layout that trained them, and decides from that
count when to step the optimizer, when to validate and when the epoch ends. gptlab's data position is global
(gptlab.data.position), so the count is converted through it: micro-batches x ranks x micro-batch = windows, divided
by this layout's ranks x micro-batch. Optimizer steps, the scheduler and the logger's step count optimizer steps and
need nothing.
"""

from __future__ import annotations

from typing import Any

from gptlab.data.position import layout
from gptlab.errors import ConfigError
from gptlab.lightning_internals import CHECKPOINT_BATCH_COUNTERS, checkpoint_batch_counters

PROGRESS = ("ready", "started", "processed", "completed")


def relayout_loops(checkpoint: dict[str, Any], trainer: Any) -> None:
    """Rewrites `checkpoint`'s batch counters in place for `trainer`'s layout, before Lightning restores its loops
    from it. Does nothing for the same layout, a streamed store (no batch layout) or checkpoints without one. A
    global batch that differs is refused later, by the data position, with the fields to set."""
    datamodule = getattr(trainer, "datamodule", None)
    saved = (checkpoint.get(type(datamodule).__qualname__) or {}).get("layout") if datamodule is not None else None
    if not saved or "batch_size" not in saved:
        return
    now = layout(trainer, datamodule.batch_size)
    old, new = saved["world_size"] * saved["batch_size"], now["world_size"] * now["batch_size"]
    if old == new:
        return
    progress = checkpoint_batch_counters(checkpoint)
    if progress is None:  # a Lightning whose checkpoints keep these counters elsewhere: never continue miscounted
        raise ConfigError(
            f"the checkpoint holds no Lightning batch counters ({CHECKPOINT_BATCH_COUNTERS}) to move to this layout; "
            f"resume with the checkpoint's {saved['world_size']} rank(s) x data.batch_size="
            f"{saved['batch_size']}, or with the Lightning version that wrote it."
        )
    for scope in ("current", "total"):
        counts = progress[scope]
        behind = counts["processed"] - counts["completed"]  # 1 when saved in on_train_batch_end, before completed
        for key in PROGRESS:
            counts[key] = counts[key] * old // new
        counts["completed"] = counts["processed"] - behind
