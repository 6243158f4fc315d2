"""Rotary position embedding (RoPE; Su et al., RoFormer 2021), applied to each head's queries and keys.

Pair i of the R rotated dimensions of a head at position p turns by the angle p * theta^(-2i/R), so the
score q_m . k_n depends on positions only through m - n. The pairs are laid out as split halves
(dimension i pairs with i + R/2, "rotate_half"), the layout Hugging Face's Llama uses, so Llama weights load
without permuting W_Q and W_K. With rope_fraction < 1 only the first R = rope_fraction * D_K dimensions
rotate (GPT-NeoX/GPT-J's partial rotary); the rest pass through unchanged.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn


def rope_angles(n_positions: int, rotary_dim: int, theta: float) -> torch.Tensor:
    """(n_positions, R/2) angles p * theta^(-2i/R), in float64 so long contexts keep their precision."""
    inv_freq = theta ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    return torch.arange(n_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]


class Rotary(nn.Module):
    """Rotates (B, H, T, D_K) queries or keys that sit at absolute positions start..start+T-1."""

    def __init__(self, rotary_dim: int, n_positions: int, theta: float) -> None:
        super().__init__()
        self.rotary_dim = rotary_dim
        angles = rope_angles(n_positions, rotary_dim, theta).repeat(1, 2)  # (T, R): halves share
        # Not in the state_dict: a function of the config, rebuilt on load (and absent from HF checkpoints).
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """`positions` (B, T), when given, replaces start.. (document masking restarts them per document)."""
        T, R = x.shape[-2], self.rotary_dim
        if positions is None:
            cos, sin = self.cos[start : start + T].to(x.dtype), self.sin[start : start + T].to(x.dtype)
        else:  # (B, 1, T, R): one angle per row's token, shared by the heads
            cos, sin = self.cos[positions][:, None].to(x.dtype), self.sin[positions][:, None].to(x.dtype)
        rot, rest = x[..., :R], x[..., R:]
        half_1, half_2 = rot.chunk(2, dim=-1)
        # Each pair (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin): a 2-D rotation by the position's angle.
        rotated = rot * cos + torch.cat([-half_2, half_1], dim=-1) * sin
        return rotated if rest.shape[-1] == 0 else torch.cat([rotated, rest], dim=-1)
