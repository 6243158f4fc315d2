"""Stability probes: what pre-LN vs post-LN, QK-norm and z-loss change inside the model, in TensorBoard.

Every `every_n_steps` optimizer steps (callbacks.stability_probes):
  x_probes/residual_rms/block_i    RMS of the residual stream after block i (embed_out: before the first)
  x_probes/grad_norm/block_i       L2 norm of block i's gradients (before clipping)
  x_probes/update_ratio/block_i    ||W_after - W_before|| / ||W_before|| over block i's weights, for that step
  x_probes/attn_entropy/layer_i    mean entropy (nats) of the attention rows of layer i
  x_probes/attn_logit_max/layer_i  largest pre-softmax score of layer i (what QK-norm bounds)
  x_probes/z_loss                  mean log^2 Z of the output logits (PaLM's z-loss term, whatever model.z_loss is)
`x_`: TensorBoard opens the first two tag groups in sort order, which must be train/ and val/ (docs/run-outputs.md).
The forward probes (RMS, entropy, logits, z) run on the first `batch_rows` rows of the step's batch, in eval
mode without gradients, so they change nothing in training; the scores are materialised by
CausalSelfAttention.scores since the fused kernels never form them.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import lightning as L
import torch
from torch.optim import Optimizer

from gptlab.execution.fsdp_strategy import shards_weights
from gptlab.model import GPT
from gptlab.model.loss import z_loss_term

log = logging.getLogger(__name__)


@torch.no_grad()
def forward_probes(model: GPT, idx: torch.Tensor) -> dict[str, float]:
    """Residual RMS per block, attention entropy and max logit per layer, and log^2 Z, for token ids idx."""
    out: dict[str, float] = {}
    was_training = model.training
    model.eval()
    try:
        x = model.embed(idx)
        out["x_probes/residual_rms/embed_out"] = float(x.pow(2).mean().sqrt())
        x0, outputs, shortcuts = x, {}, model.shortcuts  # the speedrun's x0 mix and skips, as GPT.forward adds them
        for i, block in enumerate(model.blocks):
            if shortcuts is not None:
                x = shortcuts.into(i, x, x0, outputs)
            if block.attn is not None:  # model.no_attn_layers: nothing to probe
                attn_in = block.place.branch_input(x, block.norm_1)
                scores = block.attn.scores(attn_in)
                probs = scores.softmax(dim=-1)
                entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
                out[f"x_probes/attn_entropy/layer_{i}"] = float(entropy.mean())
                out[f"x_probes/attn_logit_max/layer_{i}"] = float(scores.max())
            x = block(x, None, None, idx)
            outputs[i] = x
            out[f"x_probes/residual_rms/block_{i}"] = float(x.pow(2).mean().sqrt())
        out["x_probes/z_loss"] = float(z_loss_term(model(idx)))
    finally:
        model.train(was_training)
    return out


def block_grad_norms(model: GPT) -> dict[str, float]:
    out = {}
    for i, block in enumerate(model.blocks):
        grads = [p.grad for p in block.parameters() if p.grad is not None]
        if grads:
            out[f"x_probes/grad_norm/block_{i}"] = float(torch.nn.utils.get_total_norm(grads))
    return out


def block_weights(model: GPT) -> list[list[torch.Tensor]]:
    """Copies of each block's matrices (dim >= 2): the weights whose update size matters, not gains and biases."""
    return [[p.detach().clone() for p in block.parameters() if p.dim() >= 2] for block in model.blocks]


def update_ratios(before: list[list[torch.Tensor]], model: GPT) -> dict[str, float]:
    out = {}
    for i, (old, block) in enumerate(zip(before, model.blocks)):
        new = [p.detach() for p in block.parameters() if p.dim() >= 2]
        delta = torch.stack([(n - o).float().norm() for n, o in zip(new, old)]).norm()
        out[f"x_probes/update_ratio/block_{i}"] = float(delta / torch.stack([o.float().norm() for o in old]).norm())
    return out


class StabilityProbes(L.Callback):
    """Writes the probes above to the run's loggers every `every_n_steps` optimizer steps (global_step % N == 0)."""

    def __init__(self, every_n_steps: int = 50, batch_rows: int = 2) -> None:
        self.every_n_steps, self.batch_rows = every_n_steps, batch_rows
        self._before: Optional[list[list[torch.Tensor]]] = None
        self._pending: dict[str, float] = {}
        self._enabled = True

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Under FSDP each rank holds a shard of every weight and gradient: per-block norms and a forward outside
        # the FSDP wrapper would be wrong, so the probes stay off there rather than log shard-local numbers.
        self._enabled = not shards_weights(trainer.strategy)
        if not self._enabled:
            log.warning("callbacks.stability_probes is off under FSDP (weights and gradients are sharded).")

    def _due(self, trainer: L.Trainer) -> bool:
        return self._enabled and trainer.global_step % self.every_n_steps == 0

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Optimizer) -> None:
        if self._due(trainer):
            self._pending = block_grad_norms(pl_module.model)
            self._before = block_weights(pl_module.model)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._before is None:  # no optimizer step was probed (not due, or still accumulating)
            return
        step = trainer.global_step  # steps done, counting the one just taken, which the grad norms belong to
        metrics = self._pending | update_ratios(self._before, pl_module.model)
        metrics |= forward_probes(pl_module.model, batch[0][: self.batch_rows])
        self._before, self._pending = None, {}
        for logger in trainer.loggers:  # direct: the values exist at this step only, whatever log_every_n_steps is
            logger.log_metrics(metrics, step=step)
