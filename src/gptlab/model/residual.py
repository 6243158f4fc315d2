"""Where a block's norms sit around its two residual branches, chosen by model.norm from one table.

Pre-LN (GPT-2/3, eq. 9): X ← X + F(Norm(X)), and a final Norm after the last block (eq. 10).
Post-LN (GPT-1 and the original Transformer): X ← Norm(X + F(X)), no final Norm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

Norm = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Placement:
    branch_input: Callable[[torch.Tensor, Norm], torch.Tensor]  # what the branch F reads
    combine: Callable[[torch.Tensor, torch.Tensor, Norm], torch.Tensor]  # (X, F's output, Norm) -> the new X
    final_norm: bool  # the default of model.final_norm


PLACEMENTS = {
    "pre": Placement(branch_input=lambda x, norm: norm(x), combine=lambda x, y, norm: x + y, final_norm=True),
    "post": Placement(branch_input=lambda x, norm: x, combine=lambda x, y, norm: norm(x + y), final_norm=False),
}
