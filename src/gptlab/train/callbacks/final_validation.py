"""Validate at the last optimizer step, whatever val_check_interval is.

Lightning validates only every `val_check_interval` steps, so a 30-step run with an interval of 80 (or a sweep
job stopped early) ends without any val/loss: no best checkpoint, an empty ablation table. Asking the loop to
stop at max_steps makes Lightning run its validation right after that step (the path early stopping takes),
so checkpoints, the best score and the summary all see it. The stop is asked for as the batch that completes the
last step begins, so that step is also a logging step (Lightning logs a step's scalars when the loop is to stop,
whatever trainer.log_every_n_steps is): a run's last train/ and x_ scalars are always in its events.

A run preempted during its final validation is saved at its last step with that validation marked as begun
(train/callbacks/preemption.py). Lightning's fit loop is done at once when it resumes there and calls no hook in
which the validation could run again, so that resume says so instead of writing a summary without it.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L

from gptlab.lightning_internals import completes_optimizer_step
from gptlab.train.callbacks.preemption import validation_cut

log = logging.getLogger(__name__)


class FinalValidation(L.Callback):
    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        step = checkpoint.get("global_step", 0)
        if 0 < trainer.max_steps <= step and validation_cut(checkpoint):
            log.warning("the final validation at step %d was cut short by a preemption and is not run again on "
                        "resume: run_summary.json and the best checkpoint leave it out; its val/loss: python "
                        "src/eval.py ckpt_path=<this checkpoint>", step)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        last = 0 < trainer.max_steps <= trainer.global_step + 1 and completes_optimizer_step(trainer)
        if last and not trainer.fast_dev_run:
            trainer.should_stop = True

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if not trainer.fast_dev_run and 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True
