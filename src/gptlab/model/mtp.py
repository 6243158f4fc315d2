"""Multi-token prediction (model.mtp_weights, model.mtp_weights_end), the speedrun's record #53 (2025-12-22).

No extra heads: the logits at position t, trained on the next token t+1, are also scored against the tokens
t+1+k, k = 1..K, with weights w_k, so the objective is CE_next + sum_k w_k mean_t CE(logits_t, token_(t+1+k))
over the positions whose token t+1+k lies in the window. The record lowers the weights to 0 over three stages
([1, .5, .25 -> 0], then [1, .5 -> 0], then [1]); here each w_k goes linearly from mtp_weights to mtp_weights_end
over the run's steps, one ramp. A function of the step alone, so a resumed run takes the same weights.
Validation, train/loss and the report score the next token alone.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F


def mtp_weights_at(start: Sequence[float], end: Optional[Sequence[float]], step: int, total: int) -> list[float]:
    """The weights at optimizer step `step` of `total`: start, moved linearly to end (None or []: constant)."""
    if not end or total <= 0:
        return list(start)
    t = min(max(step / total, 0.0), 1.0)
    return [a + (b - a) * t for a, b in zip(start, end)]


def mtp_term(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
             label_smoothing: float = 0.0) -> torch.Tensor:
    """sum_k w_k mean CE(logits[:, t], targets[:, t + k]) for (B, T, V) logits already cut to the vocabulary,
    targets (B, T) the next tokens, and weights (K,) for k = 1..K."""
    total = logits.new_zeros((), dtype=torch.float32)
    for k in range(1, weights.numel() + 1):
        if k >= targets.shape[1]:
            break
        ahead = logits[:, :-k].float().reshape(-1, logits.size(-1))
        total = total + weights[k - 1] * F.cross_entropy(ahead, targets[:, k:].reshape(-1),
                                                         label_smoothing=label_smoothing)
    return total
