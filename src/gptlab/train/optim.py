"""Optimizers and learning-rate schedules, as Hydra `_partial_` targets (conf/optimizer, conf/scheduler).

Every schedule is a LambdaLR over a plain function of the step, so its state in a checkpoint is just the
step counter and resuming lands on the same lr.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Optional, Sequence

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from gptlab.config.rules import mup_optimizer_refusal
from gptlab.config.schemas import Constant, Cosine, WarmupStableDecay
from gptlab.config.validate import check_fields
from gptlab.errors import ConfigError
from gptlab.model.parametrization import PARAMETRIZATIONS, hidden_matrices

# Device types whose AdamW has a fused (single-kernel) implementation in torch >= 2.4.
FUSED_DEVICES = ("cuda", "cpu")


LR_MULT = "lr_mult"  # a param group's factor on the optimizer's lr (muP's hidden matrices: 1/r)


def hidden_lr_mult(model: nn.Module) -> float:
    """The factor model.parametrization puts on the hidden matrices' lr (1 for a model without a GPTConfig)."""
    cfg = getattr(model, "config", None)
    return PARAMETRIZATIONS[cfg.parametrization].hidden_lr_mult(cfg.width_mult) if cfg is not None else 1.0


def weight_decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices and embeddings (dim ≥ 2) only: decaying biases and LayerNorm gains pulls them
    toward 0 rather than toward their neutral value, which only hurts (GPT-3 appendix B, nanoGPT). Under muP
    the hidden matrices get a group of their own whose `lr_mult` is 1/r (`scale_group_lrs` applies it)."""
    params = [p for p in model.parameters() if p.requires_grad]  # a tied head appears once
    mult = hidden_lr_mult(model)
    scaled = hidden_matrices(model) if mult != 1.0 else set()
    groups = [
        {"params": [p for p in params if p.dim() >= 2 and id(p) not in scaled], "weight_decay": weight_decay,
         "name": "decay"},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0, "name": "no_decay"},
    ]
    if scaled:
        groups.insert(0, {"params": [p for p in params if id(p) in scaled], "weight_decay": weight_decay,
                          "name": "hidden", LR_MULT: mult})
    return groups


def param_groups(factory: Callable[..., Optimizer], model: nn.Module, weight_decay: float) -> list[dict]:
    """The groups an optimizer factory is called with: its function's own `param_groups(model, weight_decay)`
    when it has one (Muon splits hidden matrices from embeddings and head), else `weight_decay_groups`. A muP
    model is refused with any optimizer but Adam(W): its per-layer lrs are Adam's."""
    func = getattr(factory, "func", factory)  # a Hydra `_partial_` is a functools.partial
    cfg = getattr(model, "config", None)
    refusal = mup_optimizer_refusal(func) if cfg is not None and cfg.parametrization == "mup" else None
    if refusal:
        raise ConfigError(refusal)
    return getattr(func, "param_groups", weight_decay_groups)(model, weight_decay)


def scale_group_lrs(optimizer: Optimizer) -> None:
    """Each group's lr times its `lr_mult`, once, right after the optimizer is built and before the schedule
    records its base lrs: a schedule then scales every group alike, and a checkpoint stores the scaled lrs."""
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * group.get(LR_MULT, 1.0)


def base_lr(group: dict) -> float:
    """A group's lr without its `lr_mult`: the lr of optimizer.lr's schedule, what the `lr` metric shows."""
    return group["lr"] / group.get(LR_MULT, 1.0)


def adamw(
    params: Iterable,
    lr: float,
    betas: Sequence[float] = (0.9, 0.95),
    eps: float = 1e-8,
    weight_decay: float = 0.1,
    fused: Optional[bool] = None,
) -> torch.optim.AdamW:
    """torch's AdamW; `fused=None` picks the fused kernel when every parameter sits on a device that has one.
    The module has already moved the model to its device when it builds the optimizer."""
    groups = list(params)
    if fused is None:
        tensors = [p for g in groups for p in (g["params"] if isinstance(g, dict) else [g])]
        fused = bool(tensors) and all(p.device.type in FUSED_DEVICES and p.is_floating_point() for p in tensors)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, fused=fused)


def _check_schedule(schema: type, total_steps: int, **values: Any) -> None:
    """A schedule's arguments, by the checks its config schema declares (gptlab.config.schemas): one range for each,
    whether the schedule comes from a config or from Python."""
    check_fields("scheduler.", values, schema)
    if total_steps < 1:
        raise ConfigError(f"the lr schedule needs trainer.max_steps >= 1 (got {total_steps}).")


def _warmup(step: int, warmup_steps: int) -> float:
    return (step + 1) / warmup_steps


def warmup_cosine_factor(step: int, total_steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """Linear warmup to 1, then cosine decay to `min_lr_ratio` at `total_steps`, flat after that."""
    if step < warmup_steps:
        return _warmup(step, warmup_steps)
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_stable_decay_factor(
    step: int, total_steps: int, warmup_steps: int, decay_fraction: float, min_lr_ratio: float
) -> float:
    """Linear warmup, the peak held, then a linear decay to `min_lr_ratio` over the last `decay_fraction`
    of the steps (WSD, Hu et al. 2024 "MiniCPM"): a run can be extended by moving only the decay."""
    if step < warmup_steps:
        return _warmup(step, warmup_steps)
    decay_steps = max(1, round(decay_fraction * total_steps))
    decay_start = max(warmup_steps, total_steps - decay_steps)
    if step < decay_start:
        return 1.0
    progress = min(1.0, (step - decay_start) / max(1, total_steps - decay_start))
    return 1.0 - (1.0 - min_lr_ratio) * progress


def constant_factor(step: int, warmup_steps: int) -> float:
    return _warmup(step, warmup_steps) if step < warmup_steps else 1.0


def warmup_cosine(optimizer: Optimizer, total_steps: int, warmup_steps: int, min_lr_ratio: float) -> LambdaLR:
    """GPT-3's schedule: linear warmup from 0 to the peak lr over `warmup_steps`, then cosine decay to
    `min_lr_ratio` × peak at `total_steps` (GPT-3 decays to 10%), constant after that."""
    _check_schedule(Cosine, total_steps, warmup_steps=warmup_steps, min_lr_ratio=min_lr_ratio)
    return LambdaLR(optimizer, lambda s: warmup_cosine_factor(s, total_steps, warmup_steps, min_lr_ratio))


def warmup_stable_decay(
    optimizer: Optimizer,
    total_steps: int,
    warmup_steps: int,
    decay_fraction: float,
    min_lr_ratio: float,
) -> LambdaLR:
    """Warmup, stable, decay: see `warmup_stable_decay_factor`."""
    _check_schedule(WarmupStableDecay, total_steps, warmup_steps=warmup_steps, decay_fraction=decay_fraction,
                    min_lr_ratio=min_lr_ratio)
    return LambdaLR(
        optimizer, lambda s: warmup_stable_decay_factor(s, total_steps, warmup_steps, decay_fraction, min_lr_ratio)
    )


def constant(optimizer: Optimizer, total_steps: int, warmup_steps: int) -> LambdaLR:
    """Linear warmup, then the peak lr to the end (`total_steps` is accepted so every schedule is called alike)."""
    _check_schedule(Constant, total_steps, warmup_steps=warmup_steps)
    return LambdaLR(optimizer, lambda s: constant_factor(s, warmup_steps))
