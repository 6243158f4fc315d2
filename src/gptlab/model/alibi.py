"""ALiBi (Press et al. 2022, "Train Short, Test Long"): no position embedding; each head h adds
-m_h * (i - j) to the score of query i and key j, after the 1/sqrt(D_K) scaling.

The slopes m_h are the paper's geometric sequence: for H a power of two, m_h = 2^(-8h/H), h = 1..H; otherwise
the slopes of the largest power of two below H, then every other slope of twice that many (the paper's code).
The bias is one more additive term next to the layer's pattern mask, so every kind (dense/local/strided)
and kernel works: sdpa and chunked take it as a float mask, flex as a score_mod. Kept apart from
sparse_attention.py so the no-ALiBi path there stays exactly as it is.
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import torch
import torch.nn.functional as F

from gptlab.errors import ConfigError
from gptlab.model.sparse_attention import QUERY_BLOCK_DIVISOR, _band_mask, _key_index, allowed_pairs, resolve_impl


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


def attend_alibi(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kind: str, window: int, impl: str = "auto",
                 scale: Optional[float] = None, dropout_p: float = 0.0) -> torch.Tensor:
    """sparse_attention.attend with the ALiBi bias: same kinds, same kernel choice (`resolve_impl`)."""
    B, H, T, _ = q.shape
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    chosen = resolve_impl(impl, kind, T, window, q.device)
    if chosen == "flex" and (dropout_p > 0.0 or (needs_grad and q.device.type == "cpu")):
        if impl != "auto":
            raise ConfigError("model.attn_impl=flex has no attention dropout and no CPU backward; "
                              "use model.attn_impl=auto or chunked.")
        chosen = "chunked"
    if chosen in ("dense", "sdpa"):
        mask = _full_mask(kind, T, window, H, q.device, q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, dropout_p=dropout_p)
    if chosen == "chunked":
        fn = _chunked_local if kind == "local" else _chunked_strided
        return fn(q, k, v, window, scale, dropout_p)
    return _flex(q, k, v, kind, window, scale)


def attend_alibi_cached(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int, k_start: int, kind: str,
                        window: int, impl: str = "auto", scale: Optional[float] = None) -> torch.Tensor:
    """Decoding: queries at q_start.., cached keys at k_start..; the bias uses the absolute distance i - j."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    if q_start == k_start and T_q == T_k:
        return attend_alibi(q, k, v, kind, window, impl, scale)
    q_pos = torch.arange(q_start, q_start + T_q, device=q.device)
    k_pos = torch.arange(k_start, k_start + T_k, device=q.device)
    mask = alibi_bias(q.shape[1], q_pos, k_pos, allowed_pairs(kind, q_pos, k_pos, window), q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def _chunked_local(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, scale: Optional[float],
                   dropout_p: float) -> torch.Tensor:
    """sparse_attention.chunked_local's blocks of c queries against their w + c keys, with the bias added to its
    band mask: inside a block, i - j = (query offset) - (key offset from the block start), the same for every
    block."""
    B, H, T, _ = q.shape
    w = min(window, T)
    c = max(1, w // QUERY_BLOCK_DIVISOR)
    n = -(-T // c)
    qt = q.transpose(1, 2)
    if n * c > T:
        qt = F.pad(qt, (0, 0, 0, 0, 0, n * c - T))
    qb = qt.reshape(B * n, c, H, -1).transpose(1, 2)
    index = _key_index(n, c, w, T, q.device)
    kb = k.transpose(1, 2).index_select(1, index).view(B * n, w + c, H, -1).transpose(1, 2)
    vb = v.transpose(1, 2).index_select(1, index).view(B * n, w + c, H, -1).transpose(1, 2)
    mask = _band_mask(B, n, c, w, window, q.device, q.dtype) + _band_bias(c, w, H, q.device, q.dtype)
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale, dropout_p=dropout_p)
    return out.transpose(1, 2).reshape(B, n * c, H, -1)[:, :T].transpose(1, 2)


@functools.lru_cache(maxsize=16)
def _band_bias(c: int, w: int, n_head: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    with torch.inference_mode(False):
        a = torch.arange(c, device=device)[:, None]  # query offset in its block
        key = torch.arange(w + c, device=device)[None, :] - w  # key offset from the block start: -w .. c-1
        return (-_slopes(n_head, device, dtype)[:, None, None] * (a - key).to(dtype))[None]  # (1, H, c, w + c)


def _chunked_strided(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, scale: Optional[float],
                     dropout_p: float) -> torch.Tensor:
    """sparse_attention.chunked_strided's w residue classes; in class r, rows a >= b are w (a - b) apart."""
    B, H, T, _ = q.shape
    n_rows = -(-T // window)
    pad = n_rows * window - T

    def by_residue(t: torch.Tensor) -> torch.Tensor:  # (B, H, T, D) -> (B, H * w, n_rows, D)
        return F.pad(t, (0, 0, 0, pad)).unflatten(2, (n_rows, window)).transpose(2, 3).flatten(1, 2)

    mask = _strided_bias(n_rows, window, H, q.device, q.dtype)
    out = F.scaled_dot_product_attention(by_residue(q), by_residue(k), by_residue(v), attn_mask=mask, scale=scale,
                                         dropout_p=dropout_p)
    return out.unflatten(1, (H, window)).transpose(2, 3).flatten(2, 3)[:, :, :T]


@functools.lru_cache(maxsize=16)
def _strided_bias(n_rows: int, window: int, n_head: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    with torch.inference_mode(False):
        rows = torch.arange(n_rows, device=device)
        causal = rows[None, :] <= rows[:, None]
        bias = alibi_bias(n_head, rows * window, rows * window, causal, dtype)  # (H, n, n)
        return bias.repeat_interleave(window, dim=0)[None]  # (1, H * w, n, n): heads major, residues minor


def _flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kind: str, window: int,
          scale: Optional[float]) -> torch.Tensor:
    """FlexAttention with the pattern's block mask and the bias as a score_mod (added after scaling)."""
    from gptlab.model.sparse_attention import _block_mask, _compiled_flex

    slopes = _slopes(q.shape[1], q.device, torch.float32)

    def score_mod(score, b, h, i, j):  # type: ignore[no-untyped-def]
        return score - slopes[h] * (i - j)

    return _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=_block_mask(kind, q.shape[-2], window,
                                                                                    str(q.device)), scale=scale)


