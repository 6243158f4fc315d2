"""Validate at the last optimizer step, whatever val_check_interval is.

Lightning validates only every `val_check_interval` steps, so a 30-step run with an interval of 80 (or a sweep
job stopped early) ends without any val/loss: no best checkpoint, an empty ablation table. Asking the loop to
stop at max_steps makes Lightning run its validation right after that step (the path early stopping takes),
so checkpoints, the best score and the summary all see it. The stop is asked for as the batch that completes the
last step begins, so that step is also a logging step (Lightning logs a step's scalars when the loop is to stop,
whatever trainer.log_every_n_steps is): a run's last train/ and x_ scalars are always in its events.

A run preempted during its final validation is saved at its last step with that validation marked as begun
(train/callbacks/preemption.py). Lightning's fit loop is done at once when it resumes there and calls no hook in
which the validation could run again, so gptlab's fit runs it after the fit (`run_cut_validation`, trainer.validate
on the restored weights): its val/loss is logged at that step and reaches run_summary.json. Only the val-best
checkpoint cannot see it (Lightning's ModelCheckpoint saves only while fitting); the resume says so.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import lightning as L

from gptlab.lightning_internals import completes_optimizer_step
from gptlab.train.callbacks.preemption import validation_cut

log = logging.getLogger(__name__)


class FinalValidation(L.Callback):
    def __init__(self) -> None:
        self.cut_at: Optional[int] = None  # the last step, whose final validation a preemption cut

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        step = checkpoint.get("global_step", 0)
        self.cut_at = step if 0 < trainer.max_steps <= step and validation_cut(checkpoint) else None

    def run_cut_validation(self, trainer: L.Trainer, module: L.LightningModule, datamodule: Any) -> None:
        """After a fit that resumed at its last step with the final validation cut: that validation, now."""
        if self.cut_at is None or trainer.global_step != self.cut_at:
            return
        log.warning("the final validation at step %d, cut short by a preemption, runs now (after the fit: the "
                    "val-best checkpoint does not consider it)", self.cut_at)
        self.cut_at = None
        trainer.validate(module, datamodule=datamodule, verbose=False)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        last = 0 < trainer.max_steps <= trainer.global_step + 1 and completes_optimizer_step(trainer)
        if last and not trainer.fast_dev_run:
            trainer.should_stop = True

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if not trainer.fast_dev_run and 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True
