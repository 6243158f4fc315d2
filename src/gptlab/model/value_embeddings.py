"""Value embeddings: a block's attention values get a second token embedding of their own, v += g * VE[token].

Introduced by the speedrun's record #14 (2024-12-04; after the value residual of Zhou et al. 2024); record #55
(2025-12-29) gated them per head: g_h = 2 sigmoid(w_h . [x[:6], VE[token][:6]]), x the attention's input, w_h
starting at 0 so g_h starts at 1. The table starts at N(0, 0.01) as the record's. An embedding, not a hidden
matrix: Muon and muP's hidden learning rate leave it to Adam, as they leave the token embedding.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

GATE_CHANNELS = 6  # channels of x and of VE that the gate reads (the record's 6 + 6)
INIT_STD = 0.01


class ValueEmbedding(nn.Module):
    def __init__(self, vocab: int, n_head: int, v_head_dim: int, gated: bool) -> None:
        super().__init__()
        self.n_head, self.v_head_dim = n_head, v_head_dim
        self.table = nn.Embedding(vocab, n_head * v_head_dim)
        self.gate = nn.Parameter(torch.zeros(n_head, 2 * GATE_CHANNELS)) if gated else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.table.weight, std=INIT_STD)
        if self.gate is not None:
            nn.init.zeros_(self.gate)

    def forward(self, idx: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """What block's values (B, T, H * D_V) get added for token ids idx (B, T), x the attention's input."""
        ve = self.table(idx)
        if self.gate is None:
            return ve
        B, T, _ = ve.shape
        reads = torch.cat([x[..., :GATE_CHANNELS], ve[..., :GATE_CHANNELS]], dim=-1)
        gate = 2 * torch.sigmoid(reads @ self.gate.T)  # (B, T, H)
        return (ve.view(B, T, self.n_head, self.v_head_dim) * gate[..., None]).view(B, T, -1)


def value_embedding(cfg, layer: int, vocab: int) -> Optional[ValueEmbedding]:
    """Block `layer`'s value embedding, when model.value_embed_layers lists it."""
    if layer not in cfg.value_embed_layers:
        return None
    return ValueEmbedding(vocab, cfg.n_head, cfg.v_head_dim, cfg.value_embed_gate)
