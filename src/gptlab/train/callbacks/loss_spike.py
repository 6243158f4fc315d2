"""Skip the optimizer step of a loss spike (llm.c's guard): z = (loss - mean) / std over the last `window`
accepted step losses; z > `z_threshold` drops the step's gradients before the optimizer sees them.

A PyTorch optimizer leaves a parameter whose .grad is None untouched (no update, no moment update, no weight
decay), so setting every gradient to None is a clean skip; the step counter and the LR schedule still advance,
as in llm.c. Skipped losses stay out of the window, so one spike does not widen the band for the next.
After `max_consecutive` skips in a row the run is not recovering: it stops with LossSpikeError (exit 2, message,
no traceback), keeping the checkpoints already written.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Optional

import lightning as L
import torch
from torch.optim import Optimizer

from gptlab.errors import ConfigError, LossSpikeError
from gptlab.lightning_internals import logs_this_step


class LossSpikeGuard(L.Callback):
    def __init__(self, z_threshold: Optional[float] = None, window: int = 100, min_history: int = 20,
                 max_consecutive: int = 10) -> None:
        """z_threshold None: off, the callback does nothing (the default config). Each value's range is its schema's
        (gptlab.config.callbacks.LossSpikeGuard), checked before the run is built."""
        if min_history > window:
            raise ConfigError(f"callbacks.loss_spike.min_history={min_history} exceeds window={window}: the window "
                              f"never holds that many losses. Use callbacks.loss_spike.min_history={window} or "
                              f"callbacks.loss_spike.window={min_history}.")
        self.z_threshold, self.min_history, self.max_consecutive = z_threshold, min_history, max_consecutive
        self.history: deque[float] = deque(maxlen=window)
        self.skipped = 0  # skipped optimizer steps in this run, logged as train/skipped_steps
        self.consecutive = 0
        # This step's loss, summed over its micro-batches (each already divided by their count) on the device: read
        # once per step, before the optimizer step, not after every micro-batch (each read idles a GPU).
        self._loss: Optional[torch.Tensor] = None

    def state_dict(self) -> dict:
        """Kept in checkpoints, so a resumed run continues the same window and counts."""
        return {"history": list(self.history), "skipped": self.skipped, "consecutive": self.consecutive}

    def load_state_dict(self, state: dict) -> None:
        self.history.extend(state["history"])
        self.skipped, self.consecutive = state["skipped"], state["consecutive"]

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        if self.z_threshold is not None:
            self._loss = loss.detach() if self._loss is None else self._loss + loss.detach()

    def z_score(self, loss: float) -> float:
        if len(self.history) < self.min_history:
            return 0.0
        mean = sum(self.history) / len(self.history)
        std = math.sqrt(sum((h - mean) ** 2 for h in self.history) / (len(self.history) - 1))
        return (loss - mean) / std if std > 0 else 0.0

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Optimizer) -> None:
        if self.z_threshold is None:
            return
        loss = 0.0 if self._loss is None else float(self._loss)
        self._loss = None
        z = self.z_score(loss)
        if z > self.z_threshold:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
            self.skipped += 1
            self.consecutive += 1
            if self.consecutive >= self.max_consecutive:
                raise LossSpikeError(
                    f"callbacks.loss_spike skipped {self.consecutive} optimizer steps in a row (step "
                    f"{trainer.global_step + 1}: loss {loss:.4g}, z-score {z:.1f} > {self.z_threshold}); the run is "
                    "not recovering. Lower optimizer.lr, raise scheduler.warmup_steps, or raise "
                    "callbacks.loss_spike.z_threshold / max_consecutive. Checkpoints written before it are kept."
                )
        else:
            self.history.append(loss)
            self.consecutive = 0
        if logs_this_step(trainer):  # Lightning drops the other steps' values
            pl_module.log("train/skipped_steps", float(self.skipped), on_step=True, on_epoch=False)
