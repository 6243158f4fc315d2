"""Stops a run whose training loss went NaN or inf, naming the first bad step, without a host sync per step.

Each micro-batch's loss stays on its device in a list; the list is read (one host sync) after every `every`-th
optimizer step (never inside an accumulated step, where a sync would idle the GPU), before every
checkpoint and validation, and at the end of training, so no checkpoint holds weights a non-finite loss already
updated. Under DDP every rank reads at the same points and they agree on the earliest (step, rank), so all ranks
stop together, naming the rank, instead of one rank stopping and the others failing in their next collective.
Always on (apps/build.py puts it first, so it has the step's loss before any other callback saves a checkpoint).
"""

from __future__ import annotations

from typing import Any, Optional

import lightning as L
import torch

from gptlab.config.schemas import Train
from gptlab.config.validate import check_fields
from gptlab.errors import NonFiniteLossError


class NonFiniteLossCheck(L.Callback):
    def __init__(self, every: int) -> None:
        check_fields("", {"nonfinite_check_every": every}, Train)  # the schema's range, also when built from Python
        self.every = every
        self._unchecked: list[tuple[int, torch.Tensor]] = []  # (step, loss) since the last check, on the device
        self._first_bad: Optional[tuple[int, float]] = None
        self._step = 0  # the optimizer step the current batch belongs to
        self._weights_only = False  # a checkpoint callback saves weights only: Lightning calls no callback then

    def remember(self, step: int, loss: torch.Tensor) -> None:
        """Keeps a step's loss, on its device: a list append, no host sync and no kernel launched."""
        self._unchecked.append((step, loss))

    def first_nonfinite(self) -> tuple[int, float]:
        """(step, loss) of the first non-finite loss, or (-1, 0.0); one host sync. Once found it stays, so every
        later check (a checkpoint written while the error unwinds, say) refuses too."""
        recorded, self._unchecked = self._unchecked, []
        if recorded and self._first_bad is None:
            losses = torch.stack([loss for _, loss in recorded]).float()
            bad = (~torch.isfinite(losses)).nonzero().flatten().tolist()
            if bad:
                self._first_bad = (recorded[bad[0]][0], float(losses[bad[0]]))
        return self._first_bad or (-1, 0.0)

    def check(self, trainer: L.Trainer, device: torch.device) -> None:
        """Raises NonFiniteLossError naming the first step whose loss was NaN or inf, agreed by all ranks."""
        step, loss = self.first_nonfinite()
        rank, world = trainer.global_rank, trainer.world_size
        if world > 1 and torch.distributed.is_initialized():
            never = float(2**52)  # "no bad step" sorts after every real (step, rank)
            key = torch.tensor([step * world + rank if step >= 0 else never, loss if step >= 0 else 0.0],
                               dtype=torch.float64, device=device)
            keys = [torch.zeros_like(key) for _ in range(world)]
            torch.distributed.all_gather(keys, key)
            first = min(keys, key=lambda k: float(k[0]))
            if float(first[0]) >= never:
                return
            step, rank, loss = float(first[0]) // world, int(float(first[0]) % world), float(first[1])
        if step >= 0:
            where = f" on rank {rank} of {world}" if world > 1 else ""
            raise NonFiniteLossError(
                f"train/loss is {loss} at step {int(step) + 1} (the step that made it, as TensorBoard and the "
                f"progress bar count){where}; "
                "the checkpoints written before it are kept. Lower optimizer.lr, raise scheduler.warmup_steps, "
                "or use trainer.precision=bf16-mixed instead of 16-mixed."
            )

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._weights_only = any(getattr(cb, "save_weights_only", False) for cb in trainer.checkpoint_callbacks)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._step = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, *args: Any) -> None:
        if isinstance(outputs, dict) and "train_loss" in outputs:  # GPTLitModule.training_step's cross-entropy
            self.remember(self._step, outputs["train_loss"])
        if trainer.global_step == self._step:  # a micro-batch inside an accumulated step: the weights are unchanged
            return
        if trainer.global_step % self.every == 0 or self._weights_only:  # a weights-only save may follow
            self.check(trainer, pl_module.device)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._weights_only:
            self.check(trainer, pl_module.device)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.check(trainer, pl_module.device)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.check(trainer, pl_module.device)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self.check(trainer, pl_module.device)  # never write a checkpoint of weights a non-finite loss has updated
