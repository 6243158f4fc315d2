"""A run resumed in its own run dir logs its checkpoint's last step again, so a kill can lose no step's scalars.

Lightning writes a step's metrics after the checkpoint callbacks of that step ran: a kill in between leaves the step
saved but its train/loss never logged. GPTLitModule keeps the newest logging step's own scalars (`step_scalars`);
this callback puts them in every checkpoint and, when a fit resumes from one in the run dir that holds its logs,
logs them again first: the same values at the same step, so where they were logged before nothing changes, and where
a kill lost them they are back. A run continued into a new dir starts its log after the checkpoint, as before.
Always on (apps/build.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import lightning as L

KEY = "last_step_scalars"  # in the checkpoint


class RelogLastStep(L.Callback):
    def __init__(self) -> None:
        self._to_relog: Optional[dict[str, Any]] = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        scalars = getattr(pl_module, "step_scalars", None)
        if scalars:
            checkpoint[KEY] = {k: float(v) for k, v in scalars.items()}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._to_relog = checkpoint.get(KEY)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        scalars, self._to_relog = dict(self._to_relog or {}), None
        if not scalars or trainer.ckpt_path is None:
            return
        # A checkpoint written before gptlab.train.step_axis holds Lightning's step ("step"), one behind.
        step = int(scalars.pop("steps_done")) if "steps_done" in scalars else int(scalars.pop("step")) + 1
        if "lr" in scalars:  # such a checkpoint's name for train/lr
            scalars["train/lr"] = scalars.pop("lr")
        checkpoint = Path(trainer.ckpt_path).resolve()
        for logger in trainer.loggers:
            if logger.save_dir is not None and Path(logger.save_dir).resolve() in checkpoint.parents:
                logger.log_metrics(scalars, step=step)
