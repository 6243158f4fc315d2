"""The speedrun's U-net shortcuts into each block's input (model.x0_mix, model.skips).

- x0 mix (record #9, 2024-11-06): block l reads x + b_l x0, x0 the embedding output (Enc+ of eq. 2, after the
  smear and the bigram embedding), b_l learned from 0: every block can reread the tokens.
- skips (U-net pattern, record #11, 2024-11-10; since record #45, 2025-11-18, one skip 4 -> 7, gated since #55,
  2025-12-29): for each pair [i, j], block j reads x + sigmoid(g) h_i, h_i block i's output, g learned from -1.5
  (sigmoid 0.18, the record's start).
The residual scalars per sublayer live in the block (block.py). Scalars are 1-D: no weight decay, Adam under Muon.
"""

from __future__ import annotations

import torch
from torch import nn

SKIP_GATE_INIT = -1.5


class Shortcuts(nn.Module):
    def __init__(self, n_layer: int, x0_mix: bool, skips: list[list[int]]) -> None:
        super().__init__()
        self.pairs = [tuple(p) for p in skips]
        self.x0_weights = nn.Parameter(torch.zeros(n_layer)) if x0_mix else None
        self.skip_gates = nn.Parameter(torch.full((len(self.pairs),), SKIP_GATE_INIT)) if self.pairs else None
        self.sources = {i for i, _ in self.pairs}  # the blocks whose output a later block reads

    def reset_parameters(self) -> None:
        if self.x0_weights is not None:
            nn.init.zeros_(self.x0_weights)
        if self.skip_gates is not None:
            nn.init.constant_(self.skip_gates, SKIP_GATE_INIT)

    def into(self, layer: int, x: torch.Tensor, x0: torch.Tensor, outputs: dict[int, torch.Tensor]) -> torch.Tensor:
        """Block `layer`'s input: x plus its share of x0 and of the earlier blocks' `outputs` it is skipped from."""
        if self.x0_weights is not None:
            x = x + self.x0_weights[layer] * x0
        for k, (i, j) in enumerate(self.pairs):
            if j == layer:
                x = x + torch.sigmoid(self.skip_gates[k]) * outputs[i]
        return x
