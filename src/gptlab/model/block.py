"""One transformer block: attention then MLP, each a residual branch with its norm placed by model.norm
(residual.PLACEMENTS: pre-LN, GPT-2/3, eq. 9; post-LN, GPT-1 and the original Transformer).

The speedrun's block-level choices, all off by default: a block may have no attention (model.no_attn_layers) or no
MLP (model.no_mlp_layers), its attention values may get a value embedding (value_embeddings.py), and with
model.residual_scalars each sublayer computes a x + c F(x) instead of x + F(x) (a and c learned; records #45,
2025-11-18: a = 1.1 per block at the start, and #73, 2026-02-12: one pair per sublayer, a from sqrt(1.1)).
"""

from __future__ import annotations

import math
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
from gptlab.model.value_embeddings import value_embedding

RESIDUAL_INIT = (math.sqrt(1.1), 1.0)  # (a, c) of a x + c F(x) at the start


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.place = PLACEMENTS[cfg.norm]
        has_attn, has_mlp = layer not in cfg.no_attn_layers, layer not in cfg.no_mlp_layers
        self.norm_1 = make_norm(cfg.norm_type, cfg.n_embd, cfg.layer_norm_eps) if has_attn else None
        self.attn = CausalSelfAttention(cfg, layer) if has_attn else None
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.norm_2 = make_norm(cfg.norm_type, cfg.n_embd, cfg.layer_norm_eps) if has_mlp else None
        self.mlp = MLP(cfg) if has_mlp else None
        self.value_embed = value_embedding(cfg, layer, cfg.padded_vocab_size) if has_attn else None
        scalars = cfg.residual_scalars
        self.attn_scalars = nn.Parameter(torch.tensor(RESIDUAL_INIT)) if scalars and has_attn else None
        self.mlp_scalars = nn.Parameter(torch.tensor(RESIDUAL_INIT)) if scalars and has_mlp else None

    def reset_parameters(self) -> None:
        for scalars in (self.attn_scalars, self.mlp_scalars):
            if scalars is not None:
                scalars.data.copy_(torch.tensor(RESIDUAL_INIT))

    def forward(self, x: torch.Tensor, cache: Optional[KVCache] = None,
                documents: Optional[Documents] = None, idx: Optional[torch.Tensor] = None) -> torch.Tensor:
        """`idx` (B, T), the token ids of x's positions, is read by a value embedding alone."""
        place = self.place
        if self.attn is not None:
            inp = place.branch_input(x, self.norm_1)
            extra = self.value_embed(idx, inp) if self.value_embed is not None else None
            attended = self.attn_drop(self.attn(inp, cache, documents, extra))
            x = place.combine(*self._scaled(x, attended, self.attn_scalars), self.norm_1)
        if self.mlp is not None:
            y = self.mlp(place.branch_input(x, self.norm_2))
            x = place.combine(*self._scaled(x, y, self.mlp_scalars), self.norm_2)
        return x

    @staticmethod
    def _scaled(x: torch.Tensor, y: torch.Tensor, scalars: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return (x, y) if scalars is None else (scalars[0] * x, scalars[1] * y)
