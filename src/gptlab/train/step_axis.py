"""Every scalar of a run sits at the count of optimizer steps done when it was measured: the step the progress bar
and the checkpoint's name show (a validation after the 80th step at 80, that step's train/loss at 80 too).

Lightning logs a batch's metrics, and the validation that batch triggered, at `_batches_that_stepped`, which it
increments after both: 79 for the 80th step. Its one public knob, a logged `step` metric, would also change the
checkpoint names (ModelCheckpoint formats `{step}` from the logged metrics) and go stale on the steps that log
nothing, so the trainer's logger connector is handed the step instead (gptlab.lightning_internals.install):
`global_step`, already counting the step just taken (the connector logs training metrics only on a batch that
stepped). Given a step, Lightning also stops adding its `epoch` scalar. Callbacks that write to the loggers directly
pass `global_step` themselves.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn


def steps_done_axis(trainer: L.Trainer) -> Callable[[Mapping[str, Any]], Optional[int]]:
    """The step a metrics dict Lightning logs without one goes to: `global_step` while fitting or validating (the
    final validation a resume runs after its fit, train/callbacks/final_validation.py), else Lightning's."""

    def logged_step(metrics: Mapping[str, Any]) -> Optional[int]:
        ours = "step" not in metrics and trainer.state.fn in (TrainerFn.FITTING, TrainerFn.VALIDATING)
        return trainer.global_step if ours else None

    return logged_step
