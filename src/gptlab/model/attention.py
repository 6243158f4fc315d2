"""Masked multi-head self-attention, DESIGN §1 eq. 5.

S_h = softmax((X W_Q,h (X W_K,h)^T + M) / sqrt(D_K)) X W_V,h and ATT(X) = [S_1 ‖ … ‖ S_H] W_O.
D_K (head_dim) and D_V (v_head_dim) are free: GPT-3 XL has H·D_K ≠ D. The residual "X +" of
eq. 5 lives in the block, where pre- and post-LN differ.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from gptlab.model.config import GPTConfig
from gptlab.model.kv_cache import KVCache


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim, self.v_head_dim = cfg.n_head, cfg.head_dim, cfg.v_head_dim
        qk_width, v_width = cfg.n_head * cfg.head_dim, cfg.n_head * cfg.v_head_dim
        # One fused projection for W_Q, W_K, W_V: a single matmul is faster than three.
        self.qkv = nn.Linear(cfg.n_embd, 2 * qk_width + v_width, bias=cfg.attn_bias)
        self.out = nn.Linear(v_width, cfg.n_embd, bias=cfg.attn_bias)  # W_O
        self.out.is_residual_projection = True
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, cache: Optional[KVCache] = None) -> torch.Tensor:
        """x holds the newest T positions; with a cache, the earlier ones come from it (incremental decoding)."""
        B, T, _ = x.shape
        qk_width = self.n_head * self.head_dim
        q, k, v = self.qkv(x).split([qk_width, qk_width, self.n_head * self.v_head_dim], dim=-1)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, D_K)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.v_head_dim).transpose(1, 2)  # (B, H, T, D_V)
        if cache is not None:
            k, v = cache.append(k, v)
        y = self.attend(q, k, v)
        y = y.transpose(1, 2).reshape(B, T, self.n_head * self.v_head_dim)  # [S_1 ‖ … ‖ S_H]
        return self.out(y)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax((Q K^T + M) / sqrt(D_K)) V, where the T_q queries are the last T_q of the T_k positions."""
        T_q, T_k = q.shape[2], k.shape[2]
        dropout_p = self.dropout if self.training else 0.0
        if T_q == T_k:  # is_causal=True is the mask M (M_ij = -inf for j > i)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        # Decoding after a cache: query i sits at position T_k - T_q + i and sees keys j <= that position
        # (SDPA's is_causal would align the mask to the top-left corner instead). One query sees everything.
        mask = None if T_q == 1 else torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).tril(T_k - T_q)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
