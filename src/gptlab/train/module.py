"""The LightningModule: the training recipe around a plain `GPT` (the step, the loss, the optimizer), and nothing about
its architecture. The watch for a non-finite loss and the re-logging of a resumed run's last step are always-on
callbacks (train/callbacks/nonfinite.py, relog.py, registered by apps/build.py)."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import lightning as L
import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from gptlab.checkpoint.rng import rng_states, set_rng_states
from gptlab.config.schemas import Runtime, Stages
from gptlab.execution.parallelize import LossFn, eager_loss_fn, parallelize
from gptlab.lightning_internals import attached_trainer, completes_optimizer_step, logs_this_step
from gptlab.model import GPT
from gptlab.model.loss import LossParts
from gptlab.model.mtp import mtp_weights_at
from gptlab.runs.relayout import relayout_loops
from gptlab.train.optim import base_lr, param_groups, scale_group_lrs
from gptlab.train.resumed_optimizer import built_settings, log_changes, reapply
from gptlab.train.source_metrics import ValidationSums
from gptlab.train.stages import StagePlan

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
        token_bytes: Optional[torch.Tensor] = None,
        runtime: Optional[Runtime] = None,
        stages: Optional[Stages] = None,
    ) -> None:
        super().__init__()
        self.model = model
        # The schedules over training (train/stages.py): None when the run has none, so a plain run takes no branch.
        self.stages = stages if stages is not None and any(
            (stages.windows, stages.seq_lens, stages.batch_sizes)) else None
        self._plan: Optional[StagePlan] = None
        # How the model runs (compile, checkpointing, sharding, attention kernel) is runtime.parallelize's, applied
        # in configure_model; training and validation call the loss function it returns (the model's forward and
        # its loss, compiled as one graph when runtime.compile). Sampling calls the plain model.
        self.runtime = runtime or Runtime(compile=False)
        self.checkpointing = self.runtime.checkpointing(sharded=False)  # resolved in configure_model (throughput)
        self.loss_fn: LossFn = eager_loss_fn(model)
        self._parallelized = False  # Lightning calls configure_model on every fit and validate
        # The newest logging step's own scalars (tensors, read only when a checkpoint is written): the checkpoint
        # carries them and a run resumed from it logs them again (train/callbacks/relog.py).
        self.step_scalars: dict[str, Any] = {}
        # The current step's cross-entropy (and log^2 Z, with model.z_loss) summed over its micro-batches so far, on
        # the device (no host read): train/loss and train/z_loss are the whole step's means, not its last
        # micro-batch's.
        self._step_loss: Optional[torch.Tensor] = None
        self._step_micro_batches = 0
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        # The optimizer settings the config built, put back over a checkpoint's on resume (train/resumed_optimizer.py),
        # and the run config the checkpoint recorded, to log what changed.
        self._built_settings: list[dict[str, Any]] = []
        self._trained_run: Optional[dict[str, Any]] = None
        self.label_smoothing = label_smoothing
        # The model's config travels in the checkpoint, so eval and sampling rebuild it without Hydra; the
        # resolved run config (plain data) goes along for the HParams tab and for eval to check the tokenizer.
        hparams = {"model": model.config.to_dict(), "label_smoothing": label_smoothing}
        self.save_hyperparameters(hparams | ({"run": run_config} if run_config else {}))
        self.best_val_loss = math.inf  # for val-best/loss; kept in checkpoints so it survives a resume
        # Bits per byte, comparable across tokenizers: the summed NLL (nats) of every evaluated target over ln 2
        # times the UTF-8 bytes those same targets stand for (`token_bytes[id]`, Tokenizer.token_byte_lengths:
        # end-of-text counts 0 bytes, its loss is kept). Counted per target, so it is exact for whatever validation
        # evaluates (limit_val_batches, the window layout, a DDP sampler's padding), never the split's text as a
        # whole. Not persistent: a table derived from the tokenizer, not state, and old checkpoints lack it.
        self.register_buffer("token_bytes", token_bytes, persistent=False)
        self.val_sums = ValidationSums()  # the whole validation set; per_source: each of a mixture's sources
        self.best_val_bpb = math.nan  # val/bpb of the validation with the best val/loss (val-best/bpb)
        self.val_sources: list[str] = []  # a mixture's sources (setup): val/loss/<name>, val/bpb/<name>
        self.per_source = torch.nn.ModuleList()

    def setup(self, stage: str) -> None:
        """One set of validation sums per validation DataLoader when the DataModule names its sources, each as wide as
        the device allows."""
        names = getattr(getattr(self.trainer, "datamodule", None), "val_sources", None) or []
        if list(names) != self.val_sources:
            self.val_sources = list(names)
            self.per_source = torch.nn.ModuleList(ValidationSums() for _ in names)
        for sums in (self.val_sums, *self.per_source):
            sums.use_device(self.trainer.strategy.root_device)

    def configure_model(self) -> None:
        """Lightning calls this under every strategy, before it moves or wraps the model: the one place where the
        model is parallelized (trainer=fsdp's strategy adds its device mesh)."""
        if self._parallelized:
            return
        strategy = self.trainer.strategy
        layout = strategy.layout() if hasattr(strategy, "layout") else {}
        self.checkpointing = self.runtime.checkpointing(sharded=layout.get("mesh") is not None)
        self.loss_fn = parallelize(self.model, self.runtime, strategy.root_device, **layout)
        self._parallelized = True

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    @property
    def plan(self) -> Optional[StagePlan]:
        """The run's schedules over its steps (stages.*, model.untie_at), once the trainer knows the run's length."""
        if self._plan is None and (self.stages is not None or self.model.config.untie_at is not None):
            self._plan = StagePlan(self.stages or Stages(), self.total_steps(), self.model.config.untie_at)
        return self._plan

    def total_steps(self) -> int:
        """The run's optimizer steps: trainer.max_steps, or what the epochs come to. The lr schedule and the
        stages both end here."""
        total_steps = self.trainer.max_steps
        if total_steps is None or total_steps < 0:
            total_steps = int(self.trainer.estimated_stepping_batches)
        return total_steps

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        plan = self.plan
        if plan is not None:
            def regroup() -> list[dict]:
                keywords = getattr(self.optimizer_factory, "keywords", {})
                return param_groups(self.optimizer_factory, self.model, keywords.get("weight_decay", 0.0))

            plan.start_step(self.model, self.global_step, self.trainer.optimizers[0], regroup)

    def on_validation_start(self) -> None:
        if self.stages is not None and self.stages.windows:  # val/loss at one window all run long
            self.model.use_window(self.model.config.attn_window)

    def _loss(self, batch: tuple[torch.Tensor, ...], label_smoothing: float = 0.0, z_loss: float = 0.0,
              mtp: Optional[torch.Tensor] = None) -> LossParts:
        """LossParts of an (x, y) batch, or of (x, y, document ids) with data.document_masking."""
        x, y, *documents = batch
        if mtp is None:  # the loss function's own arguments, as before multi-token prediction
            return self.loss_fn(x, y, documents[0] if documents else None, label_smoothing, z_loss)
        return self.loss_fn(x, y, documents[0] if documents else None, label_smoothing, z_loss, mtp)

    def _mtp_weights(self) -> Optional[torch.Tensor]:
        """This step's multi-token weights (model/mtp.py), from the optimizer step alone: a resumed run takes the
        same ones. None when model.mtp_weights is empty."""
        cfg = self.model.config
        if not cfg.mtp_weights:
            return None
        weights = mtp_weights_at(cfg.mtp_weights, cfg.mtp_weights_end, self.global_step, self.total_steps())
        return torch.tensor(weights, dtype=torch.float32, device=self.device)

    def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> dict[str, torch.Tensor]:
        if self.stages is not None:  # the stage's rows and sequence length (train/stages.py)
            batch = self.plan.batch(batch, self.global_step)
        self.trained_tokens = batch[0].numel()  # this micro-batch's, after the stage's cut: TokenThroughput counts it
        # The objective adds model.z_loss * log^2 Z (PaLM); train/loss stays the cross-entropy alone, comparable
        # across runs with and without it, and train/z_loss logs the unscaled log^2 Z.
        parts = self._loss(batch, self.label_smoothing, self.model.config.z_loss, self._mtp_weights())
        loss = parts.ce.detach()
        sums = loss if parts.z is None else torch.stack([loss, parts.z.detach()])  # [ce] or [ce, log^2 Z]
        self._step_loss = sums if self._step_loss is None else self._step_loss + sums
        self._step_micro_batches += 1
        step_loss, micro_batches = self._step_loss, self._step_micro_batches
        if completes_optimizer_step(self.trainer):
            self._step_loss, self._step_micro_batches = None, 0
        if logs_this_step(self.trainer):
            # Only on the steps whose metrics reach the logger: a self.log costs ~0.2 ms of Lightning's Python
            # (it walks its result object every call), a few % of a GPU step, and Lightning drops the other steps'
            # values anyway. The progress bar reads the step's loss from training_step's output instead.
            # At the step count after this step (gptlab.train.step_axis), as Lightning will log them.
            self.step_scalars = {"steps_done": self.global_step + 1}
            # The step's mean over its micro-batches and its ranks (one scalar all-reduce, on logging steps only):
            # the loss of the whole batch the step was taken on, the same on any layout of ranks and accumulation.
            # Every micro-batch holds the same number of targets (the train loaders drop a last partial batch), so the
            # mean of their means is the token mean.
            step_means = step_loss / micro_batches
            step_loss = step_means if parts.z is None else step_means[0]
            self.log("train/loss", step_loss, on_step=True, on_epoch=False, sync_dist=True)
            self.step_scalars["train/loss"] = step_loss
            # Logged here rather than by LearningRateMonitor, which splits it per parameter group
            # ("lr-AdamW/decay", "lr-AdamW/no_decay") although both follow the same schedule; under train/ so that
            # TensorBoard opens on train/ and val/ (see docs/run-outputs.md).
            lr = base_lr(self.trainer.optimizers[0].param_groups[0])  # muP's hidden group: without its 1/r
            self.log_step_scalar("train/lr", lr)
            if parts.z is not None:  # the step's mean over micro-batches and ranks, as train/loss
                self.log("train/z_loss", step_means[1], on_step=True, on_epoch=False, sync_dist=True)
                self.step_scalars["train/z_loss"] = step_means[1]
        # train_loss: the cross-entropy alone, for the non-finite check (train/callbacks/nonfinite.py)
        return {"loss": parts.objective, "train_loss": loss}

    def log_step_scalar(self, name: str, value: float) -> None:
        """self.log for a callback's per-step scalar on a logging step, kept with the step's own scalars so that a
        checkpoint written before Lightning logs them carries it too (see __init__)."""
        self.log(name, value, on_step=True, on_epoch=False)
        self.step_scalars[name] = value

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        # Called after backward (and AMP unscaling) and before clipping: the norm that clipping compares to 1.0.
        # Only on the steps whose metrics reach the logger: on the others Lightning would drop the value, and the
        # norm is a pass over every gradient (Lightning's clipping makes its own).
        if not logs_this_step(self.trainer):
            return
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)
        self.log_step_scalar("train/grad_norm", norm.detach())

    def configure_gradient_clipping(self, optimizer: Optimizer, gradient_clip_val: Optional[float] = None,
                                    gradient_clip_algorithm: Optional[str] = None) -> None:
        """Norm clipping done here rather than by Lightning's precision plugin, which refuses any fused optimizer
        under mixed precision (it cannot tell bf16, which has no loss scaling, from 16-mixed). Under bf16-mixed and
        fp32 the gradients are the true ones, so torch's clip (foreach, one kernel per dtype and device) is exact;
        16-mixed with a fused optimizer is refused by the config (optimizer.fused)."""
        if not gradient_clip_val:
            return
        if gradient_clip_algorithm not in (None, "norm"):
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(params, gradient_clip_val, foreach=True)

    def validation_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int, dataloader_idx: int = 0) -> None:
        y = batch[1]
        # Plain NLL (eq. 13), without label smoothing, so val/loss is comparable across runs.
        loss = self._loss(batch).ce
        self.val_sums.update(loss, y, self.token_bytes)
        if self.val_sources:
            self.per_source[dataloader_idx].update(loss, y, self.token_bytes)

    def on_validation_epoch_end(self) -> None:
        loss, bpb = self.val_sums.compute(with_bpb=self.token_bytes is not None)  # synchronised across ranks
        # Already reduced over ranks by the metrics; sync_dist only keeps Lightning's bookkeeping in step.
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)
        self.log("val/ppl", torch.exp(loss), sync_dist=True)
        if bpb is not None:
            self.log("val/bpb", bpb, sync_dist=True)
        for name, sums in zip(self.val_sources, self.per_source):
            source_loss, source_bpb = sums.compute(with_bpb=self.token_bytes is not None)
            self.log(f"val/loss/{name}", source_loss, sync_dist=True)
            if source_bpb is not None:
                self.log(f"val/bpb/{name}", source_bpb, sync_dist=True)
        if not self.trainer.sanity_checking:
            if float(loss) < self.best_val_loss:
                self.best_val_loss = float(loss)
                self.best_val_bpb = math.nan if bpb is None else float(bpb)
            # The HParams tab's metrics (callbacks.hparams). Equal on every rank (from synced metrics); sync_dist
            # costs one scalar all-reduce per validation and spares Lightning's per-rank warning under DDP.
            self.log("val-best/loss", self.best_val_loss, sync_dist=True)
            if bpb is not None:
                self.log("val-best/bpb", self.best_val_bpb, sync_dist=True)

    def configure_optimizers(self) -> Any:
        if self.optimizer_factory is None:
            raise ValueError("GPTLitModule was built without an optimizer, for evaluation only; it cannot train.")
        keywords = getattr(self.optimizer_factory, "keywords", {})
        extra = {}
        if "fused" in keywords and keywords["fused"] is None and str(self.trainer.precision) == "16-mixed":
            # 16-mixed scales the loss; a fused step unscales inside itself, after clipping would have run on the
            # scaled gradients. bf16-mixed and fp32 have no scaling: fused there (configure_gradient_clipping).
            extra["fused"] = False
        groups = param_groups(self.optimizer_factory, self.model, keywords.get("weight_decay", 0.0))
        optimizer = self.optimizer_factory(groups, **extra)
        scale_group_lrs(optimizer)
        self._built_settings = built_settings(optimizer)
        scheduler = self.scheduler_factory(optimizer, total_steps=self.total_steps()) if self.scheduler_factory \
            else None
        if self.plan is not None:  # stages.batch_sizes: the lr times the batch's factor
            scheduler = self.plan.scale_lr(scheduler, optimizer)
        if scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Lightning does not save the RNGs; dropout draws from them, so exact resume needs them.
        checkpoint["rng_states"] = rng_states()
        checkpoint["best_val_loss"] = self.best_val_loss
        checkpoint["best_val_bpb"] = self.best_val_bpb

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        trainer = attached_trainer(self)
        if trainer is not None:  # resumed by fit, maybe on another number of ranks
            relayout_loops(checkpoint, trainer)
        if "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"])
        self.best_val_loss = checkpoint.get("best_val_loss", math.inf)
        self.best_val_bpb = checkpoint.get("best_val_bpb", math.nan)
        self._trained_run = (checkpoint.get("hyper_parameters") or {}).get("run")

    def on_train_start(self) -> None:
        """After Lightning restored a checkpoint's optimizer and schedule: the settings this run was given apply."""
        if self.trainer.ckpt_path is None or not self._built_settings:
            return
        configs = self.trainer.lr_scheduler_configs
        if reapply(self.trainer.optimizers[0], configs[0].scheduler if configs else None, self._built_settings):
            log_changes(self._trained_run, self.hparams.get("run"), self.global_step)
