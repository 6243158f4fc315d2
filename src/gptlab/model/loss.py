"""Next-token loss: NLL of the true next token (eq. 13); label smoothing is eq. 12's soft targets."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy over all positions; `targets` are the inputs shifted left by one."""
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), label_smoothing=label_smoothing
    )


def z_loss_term(logits: torch.Tensor) -> torch.Tensor:
    """PaLM's auxiliary term (Chowdhery et al. 2022, §5): mean over positions of log^2 Z, Z = sum_v exp(logit_v).
    Added to the training loss times model.z_loss, it keeps the softmax normaliser near 1 (log Z near 0)."""
    return logits.float().logsumexp(dim=-1).square().mean()
