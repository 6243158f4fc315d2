"""ALiBi (Press et al. 2022, "Train Short, Test Long"): no position embedding; each head h adds
-m_h * (i - j) to the score of query i and key j, after the 1/sqrt(D_K) scaling.

The slopes m_h are the paper's geometric sequence: for H a power of two, m_h = 2^(-8h/H), h = 1..H; otherwise
the slopes of the largest power of two below H, then every other slope of twice that many (the paper's code).
The bias is one more additive term next to the layer's pattern mask, so every kind (dense/local/strided)
and kernel works: `ALiBi` gives sparse_attention.attend the bias in each kernel's layout (a float mask for
sdpa and chunked, a score_mod for flex).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch

from gptlab.model.sparse_attention import allowed_pairs


def alibi_slopes(n_head: int) -> list[float]:
    """m_1..m_H of the paper (§3): 1/2, 1/4, ..., 1/256 for 8 heads."""
    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    if math.log2(n_head).is_integer():
        return power_of_two(n_head)
    lower = 2 ** math.floor(math.log2(n_head))
    return power_of_two(lower) + power_of_two(2 * lower)[0::2][: n_head - lower]


def _slopes(n_head: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(alibi_slopes(n_head), device=device, dtype=dtype)


def _score_mod(slopes: torch.Tensor) -> Callable[..., Any]:
    def score_mod(score, b, h, i, j):  # type: ignore[no-untyped-def]
        return score - slopes[h] * (i - j)

    return score_mod


def alibi_bias(n_head: int, q_pos: torch.Tensor, k_pos: torch.Tensor, allowed: torch.Tensor,
               dtype: torch.dtype) -> torch.Tensor:
    """(H, Tq, Tk) additive mask: -m_h (i - j) where allowed, -inf elsewhere."""
    distance = (q_pos[:, None] - k_pos[None, :]).to(dtype)
    bias = -_slopes(n_head, q_pos.device, dtype)[:, None, None] * distance
    return bias.masked_fill(~allowed, float("-inf"))


@functools.lru_cache(maxsize=32)
def _full_mask(kind: str, T: int, window: int, n_head: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(1, H, T, T), cached per shape: built once, not every step. Outside inference mode so that a mask first
    made in validation can be saved for a later training step's backward."""
    with torch.inference_mode(False):
        pos = torch.arange(T, device=device)
        return alibi_bias(n_head, pos, pos, allowed_pairs(kind, pos, pos, window), dtype)[None]


@functools.lru_cache(maxsize=16)
def _band_bias(c: int, w: int, n_head: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    with torch.inference_mode(False):
        a = torch.arange(c, device=device)[:, None]  # query offset in its block
        key = torch.arange(w + c, device=device)[None, :] - w  # key offset from the block start: -w .. c-1
        return (-_slopes(n_head, device, dtype)[:, None, None] * (a - key).to(dtype))[None]  # (1, H, c, w + c)


@functools.lru_cache(maxsize=16)
def _strided_bias(n_rows: int, window: int, n_head: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    with torch.inference_mode(False):
        rows = torch.arange(n_rows, device=device)
        causal = rows[None, :] <= rows[:, None]
        bias = alibi_bias(n_head, rows * window, rows * window, causal, dtype)  # (H, n, n)
        return bias.repeat_interleave(window, dim=0)[None]  # (1, H * w, n, n): heads major, residues minor


class ALiBi:
    """The bias for `n_head` heads, in the layout each attention kernel takes (sparse_attention.ScoreBias)."""

    def __init__(self, n_head: int) -> None:
        self.n_head = n_head
        self._score_mods: dict[torch.device, Callable[..., Any]] = {}  # one per device, made once: see score_mod

    def pairs(self, q_pos: torch.Tensor, k_pos: torch.Tensor, allowed: torch.Tensor,
              dtype: torch.dtype) -> torch.Tensor:
        return alibi_bias(self.n_head, q_pos, k_pos, allowed, dtype)

    def full(self, kind: str, T: int, window: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return _full_mask(kind, T, window, self.n_head, device, dtype)

    def band(self, c: int, w: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return _band_bias(c, w, self.n_head, device, dtype)

    def strided(self, n_rows: int, window: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return _strided_bias(n_rows, window, self.n_head, device, dtype)

    def score_mod(self, device: torch.device) -> Callable[..., Any]:
        """FlexAttention's score_mod, made once per device: compiled flex sees the same function every call
        instead of a new closure (and new slopes) per forward."""
        if torch.compiler.is_compiling():  # a traced graph holds its slopes itself
            return _score_mod(_slopes(self.n_head, device, torch.float32))
        if device not in self._score_mods:
            with torch.inference_mode(False):  # a score_mod first made in validation also serves training
                self._score_mods[device] = _score_mod(_slopes(self.n_head, device, torch.float32))
        return self._score_mods[device]
