"""One transformer block: pre-LN (GPT-2/3, eq. 9) or post-LN (GPT-1 and the original Transformer)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from gptlab.model.attention import CausalSelfAttention
from gptlab.model.config import GPTConfig
from gptlab.model.kv_cache import KVCache
from gptlab.model.mlp import MLP
from gptlab.model.norms import make_norm


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.norm_1 = make_norm(cfg)  # LayerNorm, or RMSNorm (model.norm_type)
        self.attn = CausalSelfAttention(cfg, layer)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.norm_2 = make_norm(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cache: Optional[KVCache] = None) -> torch.Tensor:
        if self.pre_norm:  # X ← X + ATT(Norm(X)); X ← X + MLP(Norm(X))
            x = x + self.attn_drop(self.attn(self.norm_1(x), cache))
            return x + self.mlp(self.norm_2(x))
        # X ← Norm(X + ATT(X)); X ← Norm(X + MLP(X))
        x = self.norm_1(x + self.attn_drop(self.attn(x, cache)))
        return self.norm_2(x + self.mlp(x))
