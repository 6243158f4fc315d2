"""Sinusoidal positions of the original Transformer ([S2]): a fixed table, no parameters."""

from __future__ import annotations

import math

import torch


def sinusoidal_table(n_positions: int, dim: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)); handles odd D."""
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    table = torch.zeros(n_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table.float()
