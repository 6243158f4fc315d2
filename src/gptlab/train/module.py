"""The LightningModule: the training recipe around a plain `GPT`, and nothing about its architecture."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import lightning as L
import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torchmetrics import MeanMetric

from gptlab.errors import NonFiniteLossError
from gptlab.model import GPT, next_token_loss
from gptlab.model.loss import z_loss_term
from gptlab.train.optim import weight_decay_groups
from gptlab.train.rng import rng_states, set_rng_states

OptimizerFactory = Callable[..., Optimizer]  # a Hydra `_partial_` optimizer: called with param groups
SchedulerFactory = Callable[..., LRScheduler]  # a Hydra `_partial_` scheduler: called with (optimizer, total_steps)


class GPTLitModule(L.LightningModule):
    def __init__(
        self,
        model: GPT,
        optimizer: Optional[OptimizerFactory] = None,  # None: evaluation only
        scheduler: Optional[SchedulerFactory] = None,
        label_smoothing: float = 0.0,
        run_config: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.label_smoothing = label_smoothing
        # The model's config travels in the checkpoint, so eval and sampling rebuild it without Hydra; the
        # resolved run config (plain data) goes along for the HParams tab and for eval to check the tokenizer.
        hparams = {"model": model.config.to_dict(), "label_smoothing": label_smoothing}
        self.save_hyperparameters(hparams | ({"run": run_config} if run_config else {}))
        self.val_loss = MeanMetric()
        self.best_val_loss = math.inf  # for hp/best_val_loss; kept in checkpoints so it survives a resume

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.model(x)
        loss = next_token_loss(logits, y, self.label_smoothing)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"train/loss is {loss.item()} at step {self.global_step} (optimizer steps done); "
                "the checkpoints written before it are kept. Lower optimizer.lr, raise scheduler.warmup_steps, "
                "or use trainer.precision=bf16-mixed instead of 16-mixed."
            )
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True)
        # Logged here rather than by LearningRateMonitor, which splits it per parameter group
        # ("lr-AdamW/decay", "lr-AdamW/no_decay") although both follow the same schedule.
        self.log("lr", self.trainer.optimizers[0].param_groups[0]["lr"], on_step=True, on_epoch=False)
        return self._add_z_loss(loss, logits)

    def _add_z_loss(self, loss: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """The training objective: + model.z_loss * log^2 Z (PaLM). train/loss stays the cross-entropy alone,
        comparable across runs with and without it; train/z_loss logs the unscaled log^2 Z."""
        coefficient = self.model.config.z_loss
        if not coefficient:
            return loss
        z = z_loss_term(logits)
        self.log("train/z_loss", z, on_step=True, on_epoch=False)
        return loss + coefficient * z

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        # Called after backward (and AMP unscaling) and before clipping: the norm that clipping compares to 1.0.
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        self.log("train/grad_norm", torch.nn.utils.get_total_norm(grads), on_step=True, on_epoch=False)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        # Plain NLL (eq. 13), without label smoothing, so val/loss is comparable across runs.
        self.val_loss.update(next_token_loss(self.model(x), y), weight=x.numel())

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()  # synchronised across ranks
        self.val_loss.reset()
        # Already reduced over ranks by the metric; sync_dist only keeps Lightning's bookkeeping in step.
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)
        self.log("val/ppl", torch.exp(loss), sync_dist=True)
        if not self.trainer.sanity_checking:
            self.best_val_loss = min(self.best_val_loss, float(loss))
            self.log("hp/best_val_loss", self.best_val_loss)  # the HParams tab's metric (callbacks.hparams)

    def configure_optimizers(self) -> Any:
        if self.optimizer_factory is None:
            raise ValueError("GPTLitModule was built without an optimizer, for evaluation only; it cannot train.")
        keywords = getattr(self.optimizer_factory, "keywords", {})
        extra = {}
        if "fused" in keywords and keywords["fused"] is None and "mixed" in str(self.trainer.precision):
            # Lightning refuses to clip gradients of a fused optimizer under mixed precision (the fused step
            # unscales internally), so "fused where supported" means fp32 runs only.
            extra["fused"] = False
        optimizer = self.optimizer_factory(weight_decay_groups(self.model, keywords.get("weight_decay", 0.0)), **extra)
        if self.scheduler_factory is None:
            return optimizer
        total_steps = self.trainer.max_steps
        if total_steps is None or total_steps < 0:
            total_steps = int(self.trainer.estimated_stepping_batches)
        scheduler = self.scheduler_factory(optimizer, total_steps=total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Lightning does not save the RNGs; dropout draws from them, so exact resume needs them.
        checkpoint["rng_states"] = rng_states()
        checkpoint["best_val_loss"] = self.best_val_loss

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"])
        self.best_val_loss = checkpoint.get("best_val_loss", math.inf)
