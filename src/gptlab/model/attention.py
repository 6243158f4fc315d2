"""Masked multi-head self-attention, eq. 5 of docs/model.md.

S_h = softmax((X W_Q,h (X W_K,h)^T + M) / sqrt(D_K)) X W_V,h and ATT(X) = [S_1 ‖ … ‖ S_H] W_O.
D_K (head_dim) and D_V (v_head_dim) are free: GPT-3 XL has H·D_K ≠ D. The residual "X +" of
eq. 5 lives in the block, where pre- and post-LN differ. Which keys a query sees (the mask M) is the
layer's kind, dense, local or strided (GPT-3's alternating layers); sparse_attention.py computes it.
Optional, all off by default: QK-norm (each head's q and k normalised), RoPE (rope.py) on q and k, and the
ALiBi bias (alibi.py) in place of the plain mask.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from gptlab.model.config import GPTConfig
from gptlab.model.documents import Documents
from gptlab.model.kv_cache import KVCache
from gptlab.model.norms import make_norm
from gptlab.model.positions import POSITIONS
from gptlab.model.rope import Rotary
from gptlab.model.sparse_attention import allowed_pairs, attend, attend_cached


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.kind = cfg.layer_kind(layer)  # dense | local | strided (a short layer is local with half the window)
        self.window, self.impl, self.scale = cfg.layer_window(layer), cfg.attn_impl, cfg.scores_scale  # muP: 1/D_K
        self.n_head, self.head_dim, self.v_head_dim = cfg.n_head, cfg.head_dim, cfg.v_head_dim
        qk_width, v_width = cfg.n_head * cfg.head_dim, cfg.n_head * cfg.v_head_dim
        # One fused projection for W_Q, W_K, W_V: a single matmul is faster than three.
        self.qkv = nn.Linear(cfg.n_embd, 2 * qk_width + v_width, bias=cfg.qkv_bias)
        self.out = nn.Linear(v_width, cfg.n_embd, bias=cfg.attn_bias)  # W_O
        self.out.is_residual_projection = "attn"  # model.zero_init_proj names it so
        self.dropout = cfg.dropout
        # QK-norm (Dehghani et al. 2023; OLMo 2, Gemma 3): one gain of size D_K each, shared by the heads.
        self.q_norm = make_norm(cfg.norm_type, cfg.head_dim, cfg.layer_norm_eps) if cfg.qk_norm else None
        self.k_norm = make_norm(cfg.norm_type, cfg.head_dim, cfg.layer_norm_eps) if cfg.qk_norm else None
        positions = POSITIONS[cfg.pos_emb]  # RoPE turns q and k; ALiBi biases the scores
        self.rotary = Rotary(cfg.rotary_dim, cfg.block_size, cfg.rope_theta) if positions.rotary else None
        self.bias = positions.score_bias(cfg.n_head) if positions.score_bias else None

    def forward(self, x: torch.Tensor, cache: Optional[KVCache] = None,
                documents: Optional[Documents] = None, extra_values: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x holds the newest T positions; with a cache, the earlier ones come from it (incremental decoding).
        With `documents` (document masking) a query sees only its own document, at positions counted from it.
        `extra_values` (B, T, H * D_V) are added to the values (value embeddings, value_embeddings.py)."""
        B, T, _ = x.shape
        qk_width = self.n_head * self.head_dim
        q, k, v = self.qkv(x).split([qk_width, qk_width, self.n_head * self.v_head_dim], dim=-1)
        if extra_values is not None:
            v = v + extra_values
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, D_K)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.v_head_dim).transpose(1, 2)  # (B, H, T, D_V)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary is not None:  # keys are cached rotated, at the position they were computed for
            start = cache.length if cache is not None else 0
            positions = documents.positions if documents is not None else None
            q, k = self.rotary(q, start, positions), self.rotary(k, start, positions)
        dropout_p = self.dropout if self.training else 0.0
        if cache is None:
            # The mask M of the layer's kind (dense: M_ij = -inf for j > i); scale None = 1/sqrt(D_K).
            y = attend(q, k, v, self.kind, self.window, self.impl, self.scale, dropout_p, self.bias, documents)
        else:
            q_start = cache.length  # absolute position of the first new query
            k, v, k_start = cache.append(k, v)
            y = attend_cached(q, k, v, q_start, k_start, self.kind, self.window, self.impl, self.scale, self.bias)
        y = y.transpose(1, 2).reshape(B, T, self.n_head * self.v_head_dim)  # [S_1 ‖ … ‖ S_H]
        return self.out(y)


    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """The (B, H, T, T) pre-softmax scores with the layer's mask (-inf) and ALiBi bias, materialised for the
        stability probes (attention entropy, max logit): the kernels in forward never form them."""
        B, T, _ = x.shape
        qk_width = self.n_head * self.head_dim
        q, k, _ = self.qkv(x).split([qk_width, qk_width, self.n_head * self.v_head_dim], dim=-1)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        scale = self.scale if self.scale is not None else self.head_dim**-0.5
        pos = torch.arange(T, device=x.device)
        allowed = allowed_pairs(self.kind, pos, pos, self.window)
        if self.bias is not None:
            mask = self.bias.pairs(pos, pos, allowed, q.dtype)
        else:
            mask = torch.zeros(T, T, dtype=q.dtype, device=x.device).masked_fill(~allowed, float("-inf"))
        return q @ k.transpose(-1, -2) * scale + mask
