"""Keys and values of past positions, so decoding one token costs one position, not the whole context.

One `KVCache` per layer. Buffers are allocated once for the longest sequence and filled in place;
`append` returns the keys/values the new queries attend to. A layer with a local attention window
would keep only the last w positions here (a ring buffer); every layer is dense for now.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, batch: int, n_head: int, max_len: int, head_dim: int, v_head_dim: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        self.k = torch.empty(batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.empty(batch, n_head, max_len, v_head_dim, dtype=dtype, device=device)
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store (B, H, T_new, ·) and return all keys and values so far, (B, H, length, ·)."""
        end = self.length + k.shape[2]
        if end > self.k.shape[2]:
            raise ValueError(f"KV cache holds {self.k.shape[2]} positions; {end} requested.")
        self.k[:, :, self.length : end] = k
        self.v[:, :, self.length : end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep batch rows `rows` (with repeats): beam search continues the best beams."""
        self.k = self.k.index_select(0, rows)
        self.v = self.v.index_select(0, rows)
