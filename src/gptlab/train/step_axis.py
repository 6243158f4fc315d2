"""Every scalar of a run sits at the count of optimizer steps done when it was measured: the step the progress bar
and the checkpoint's name show (a validation after the 80th step at 80, that step's train/loss at 80 too).

Lightning logs a batch's metrics, and the validation that batch triggered, at `_batches_that_stepped`, which it
increments after both: 79 for the 80th step. Its one public knob, a logged `step` metric, would also change the
checkpoint names (ModelCheckpoint formats `{step}` from the logged metrics) and go stale on the steps that log
nothing, so the trainer's logger connector is handed the step instead: `global_step`, already counting the step
just taken (the connector logs training metrics only on a batch that stepped). Given a step, Lightning also stops
adding its `epoch` scalar. Callbacks that write to the loggers directly pass `global_step` themselves.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn


def log_at_steps_done(trainer: L.Trainer) -> None:
    """While fitting, every metrics dict Lightning logs without a step goes to the loggers at `global_step`."""
    connector = trainer._logger_connector  # private: see gptlab.launch.lightning_internals
    lightning_log_metrics = connector.log_metrics

    def log_metrics(metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        if step is None and "step" not in metrics and trainer.state.fn == TrainerFn.FITTING:
            step = trainer.global_step
        lightning_log_metrics(metrics, step)

    connector.log_metrics = log_metrics
