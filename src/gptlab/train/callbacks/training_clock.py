"""The run summary's `tokens_per_sec`: tokens this fit trained over the seconds its training steps took.

The TokenThroughput callback's rate is windowed (the last `window_size` batches) and exists only once a window
is full, and only if that callback is configured: a 3-step run or a short continued run had none. This clock is
always on. It counts wall-clock time from the start of training to the end of its last step, data loading
included, minus every validation (and what runs inside it: sampling, zero-shot tasks, the best checkpoint), so
the number compares runs whatever their val_check_interval. A continued run measures its own steps only.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import lightning as L

from gptlab.execution.fused import clock


class TrainingClock(L.Callback):
    def __init__(self) -> None:
        self.seconds = 0.0  # in training steps, this fit
        self.earlier = 0.0  # in the fits a time-budgeted run continued from (train/callbacks/time_budget.py)
        self._mark: Optional[float] = None
        self._first_step = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._first_step, self._mark = trainer.global_step, clock()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        now = clock()
        if self._mark is not None:
            self.seconds += now - self._mark
        self._mark = now

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._mark = clock()  # the validation just ended is not training time

    def so_far(self) -> float:
        """This fit's training seconds up to now, the step under way included."""
        return self.seconds + (clock() - self._mark if self._mark is not None else 0.0)

    def tokens_per_sec(self, global_step: int, tokens_through: Callable[[int], int]) -> Optional[float]:
        """Tokens per second of this fit's optimizer steps (all devices); None if it trained no step.
        `tokens_through(step)`: the tokens trained before `step` (gptlab.train.stages.tokens_trained)."""
        tokens = tokens_through(global_step) - tokens_through(self._first_step)
        return tokens / self.seconds if global_step > self._first_step and self.seconds > 0 else None
