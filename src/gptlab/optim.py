"""Parameter groups for weight decay and the learning-rate schedule."""

from __future__ import annotations

import math

from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from gptlab.errors import ConfigError


def weight_decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices and embeddings (dim ≥ 2) only: decaying biases and LayerNorm gains pulls them
    toward 0 rather than toward their neutral value, which only hurts (GPT-3 appendix B, nanoGPT)."""
    params = [p for p in model.parameters() if p.requires_grad]  # a tied head appears once
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay, "name": "decay"},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0, "name": "no_decay"},
    ]


def warmup_cosine(
    optimizer: Optimizer, total_steps: int, warmup_steps: int = 100, min_lr_ratio: float = 0.1
) -> LambdaLR:
    """Linear warmup from 0 to the peak lr over `warmup_steps`, then cosine decay to
    `min_lr_ratio` × peak at `total_steps` (GPT-3 decays to 10%), constant after that."""
    if warmup_steps < 0:
        raise ConfigError(f"scheduler.warmup_steps={warmup_steps!r} must be >= 0.")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ConfigError(f"scheduler.min_lr_ratio={min_lr_ratio!r} must be in [0, 1].")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)
