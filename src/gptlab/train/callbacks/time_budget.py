"""`budget=seconds:S`: train for S seconds of training steps and lay the lr schedule over them.

Seconds are the TrainingClock's (training steps, data loading included, every validation excluded), summed over a
run's continuations (this callback's state is in every checkpoint), so the budget buys the same training whatever
the validation interval. The clock of rank 0 decides, sent to every rank each step (as Lightning's Timer does), so
that every rank takes the same lr and stops at the same step.

The schedule keeps its warmup in steps (warmup is about the first updates' stability, not about time) and lays
what follows over the seconds left after it: at step s past the warmup w, the lr is the one the configured schedule
gives at step w + (M - w)·f, f the share of those seconds spent and M the steps it was planned over
(trainer.max_steps, which the budget set to a ceiling: gptlab.config.budget). It is therefore the planned lr curve,
stretched in time, and it reaches the schedule's end lr when the seconds run out. When they do, the run ends as at
max_steps: final validation, last checkpoint, summary. Like Lightning's max_time, the step count a run gets depends
on the machine, so its result is not reproducible step for step; the campaign refuses to compare seconds across
machines (gptlab.campaign.verdict).
"""

from __future__ import annotations

from typing import Any, Callable

import lightning as L
from torch.optim.lr_scheduler import LambdaLR

from gptlab.lightning_internals import end_training_after
from gptlab.train.callbacks.training_clock import TrainingClock


class TimeBudget(L.Callback):
    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self.earlier = 0.0  # training seconds of the fits this run continued from (from the checkpoint)
        self.spent = 0.0  # training seconds of the whole run so far, as rank 0 counted them
        self.warmup_spent: float | None = None  # `spent` when the warmup's last step ended (None: not yet)
        self._clock: TrainingClock | None = None
        self._warmup = 0
        self._last_step = -1

    @property
    def state_key(self) -> str:
        return "TimeBudget"

    def state_dict(self) -> dict[str, Any]:
        return {"spent": self.spent, "warmup_spent": self.warmup_spent}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.earlier = self.spent = float(state.get("spent", 0.0))
        self.warmup_spent = state.get("warmup_spent")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._clock = next(c for c in trainer.callbacks if isinstance(c, TrainingClock))  # apps.build adds it
        self._clock.earlier = self.earlier
        keywords = getattr(getattr(pl_module, "scheduler_factory", None), "keywords", {}) or {}
        self._warmup = int(keywords.get("warmup_steps", 0) or 0)
        planned = trainer.max_steps
        for config in trainer.lr_scheduler_configs:  # gptlab's schedules (config.budget refuses any other)
            assert isinstance(config.scheduler, LambdaLR), type(config.scheduler)
            config.scheduler.lr_lambdas = [self._over_time(f, planned) for f in config.scheduler.lr_lambdas]
        self._stop_if_spent(trainer)

    def _over_time(self, factor: Callable[[int], float], planned: int) -> Callable[[int], float]:
        """The schedule's factor at the step the share of the budget spent stands for (a plain function: LambdaLR
        saves no state for it, so the checkpoint holds the step counter alone, as without a budget)."""
        warmup = self._warmup

        def at(step: int) -> float:
            if step <= warmup or self.warmup_spent is None:
                return factor(step)
            left = self.seconds - self.warmup_spent
            share = 1.0 if left <= 0 else min(1.0, max(0.0, (self.spent - self.warmup_spent) / left))
            return factor(warmup + (planned - warmup) * share)  # type: ignore[arg-type]

        return at

    def on_before_optimizer_step(self, trainer: L.Trainer, *args: Any) -> None:
        """The seconds spent through this step's backward: the lr the next step takes is decided after this one."""
        self.spent = self._agreed(trainer, self._clock.so_far() if self._clock is not None else 0.0)
        if self.warmup_spent is None and trainer.global_step + 1 >= self._warmup:  # this step ends the warmup
            self.warmup_spent = self.spent

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self._last_step:  # a micro-batch accumulated into the next optimizer step
            return
        self._last_step = trainer.global_step
        self.spent = self._agreed(trainer, self._clock.seconds if self._clock is not None else 0.0)
        self._stop_if_spent(trainer)

    def _agreed(self, trainer: L.Trainer, seconds: float) -> float:
        """The run's training seconds as rank 0 counts them, on every rank."""
        return float(trainer.strategy.broadcast(self.earlier + seconds, src=0))

    def _stop_if_spent(self, trainer: L.Trainer) -> None:
        """The run ends as one that reached trainer.max_steps: its final validation, last checkpoint and summary."""
        if self.spent >= self.seconds and trainer.max_steps > trainer.global_step:
            end_training_after(trainer, trainer.global_step)
            trainer.should_stop = True  # the stop that validates first (train/callbacks/final_validation.py)
