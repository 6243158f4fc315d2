"""One transformer block: attention then MLP, each a residual branch with its norm placed by model.norm
(residual.PLACEMENTS: pre-LN, GPT-2/3, eq. 9; post-LN, GPT-1 and the original Transformer)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from gptlab.model.attention import CausalSelfAttention
from gptlab.model.config import GPTConfig
from gptlab.model.documents import Documents
from gptlab.model.kv_cache import KVCache
from gptlab.model.mlp import MLP
from gptlab.model.norms import make_norm
from gptlab.model.residual import PLACEMENTS


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.place = PLACEMENTS[cfg.norm]
        self.norm_1 = make_norm(cfg.norm_type, cfg.n_embd, cfg.layer_norm_eps)
        self.attn = CausalSelfAttention(cfg, layer)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.norm_2 = make_norm(cfg.norm_type, cfg.n_embd, cfg.layer_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cache: Optional[KVCache] = None,
                documents: Optional[Documents] = None) -> torch.Tensor:
        place = self.place
        attended = self.attn(place.branch_input(x, self.norm_1), cache, documents)
        x = place.combine(x, self.attn_drop(attended), self.norm_1)
        return place.combine(x, self.mlp(place.branch_input(x, self.norm_2)), self.norm_2)
