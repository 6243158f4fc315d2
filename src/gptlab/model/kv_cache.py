"""Keys and values of past positions, so decoding one token costs one position, not the whole context.

One `KVCache` per layer. A dense or strided layer may attend to any earlier position, so its buffers are
allocated once for the longest sequence and filled in place. A local layer (band width w) never looks
further back than w - 1 positions, so its cache keeps only those: memory O(w) instead of O(T).
"""

from __future__ import annotations

from typing import Optional

import torch


class KVCache:
    def __init__(self, batch: int, n_head: int, max_len: int, head_dim: int, v_head_dim: int,
                 dtype: torch.dtype, device: torch.device, window: Optional[int] = None) -> None:
        self.window = window
        capacity = max_len if window is None else 0  # a windowed cache grows to w - 1 positions by concatenation
        self.k = torch.empty(batch, n_head, capacity, head_dim, dtype=dtype, device=device)
        self.v = torch.empty(batch, n_head, capacity, v_head_dim, dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0  # positions seen so far; the next key is at this absolute position
        self.start = 0  # absolute position of the first key held
        # (B, 1) id of the newest token so far: what the smear and the bigram embedding read before the next one
        self.last_token: Optional[torch.Tensor] = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Store (B, H, T_new, ·); return the keys and values the new queries attend to and the absolute
        position of the first of them."""
        end = self.length + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; {end} requested.")
        if self.window is None:
            self.k[:, :, self.length : end] = k
            self.v[:, :, self.length : end] = v
            self.length = end
            return self.k[:, :, :end], self.v[:, :, :end], 0
        keys, values, first = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2), self.start
        keep = min(self.window - 1, keys.shape[2])  # what a later query can still see
        self.k, self.v = keys[:, :, keys.shape[2] - keep :], values[:, :, values.shape[2] - keep :]
        self.start, self.length = end - keep, end
        return keys, values, first

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep batch rows `rows` (with repeats): beam search continues the best beams."""
        self.k = self.k.index_select(0, rows)
        self.v = self.v.index_select(0, rows)
        if self.last_token is not None:
            self.last_token = self.last_token.index_select(0, rows)
