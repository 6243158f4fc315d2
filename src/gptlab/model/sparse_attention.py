"""Attention kernels for the per-layer patterns of GPT-3 (seed 003) and the Sparse Transformer.

A layer's kind says which keys j a query i may see (always j <= i; w = model.attn_window):
  dense    every j <= i                                   (eq. 5's causal mask M)
  local    i - w < j <= i, a band of w keys                (GPT-3's "locally banded" layers, GPT-Neo's "local")
  strided  j <= i with (i - j) divisible by w              (Sparse Transformer's strided head; [local, strided]
                                                            is its factorised pattern with stride l = w)

Kernels (model.attn_impl): `sdpa` computes all T x T scores with an explicit mask (the reference; O(T^2));
`chunked` computes only the blocks the pattern touches with plain SDPA calls (O(T*w) for local, O(T^2/w) for
strided; forward and backward on any device); `flex` is FlexAttention with a block mask, compiled (GPUs;
on CPU it has no backward). `auto` picks per call, see `resolve_impl`.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from gptlab.errors import ConfigError
# On CPU, band-limited work beats dense causal work once T reaches about this many windows (DESIGN §5 and
# scripts/bench_attention.py); below it the dense causal kernel's better constants win.
LOCAL_CPU_MIN_WINDOWS = 4


def pattern_mask(kind: str, T: int, window: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """The (T, T) boolean mask of allowed (query i, key j) pairs: True = attend."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    allowed = j <= i
    if kind == "local":
        allowed &= i - j < window
    elif kind == "strided":
        allowed &= (i - j) % window == 0
    return allowed


def resolve_impl(impl: str, kind: str, T: int, window: int, device: torch.device) -> str:
    """The kernel that computes this call: `impl` itself unless it is `auto`.

    auto: dense layers, and local layers whose band covers the whole sequence (w >= T, so local == dense),
    use SDPA's causal kernel ("dense"). On CPU, local layers use `chunked` once T >= 4w and the masked `sdpa`
    below that; strided layers always use `chunked`. FlexAttention is never auto-picked on CPU, with or
    without gradients: it has no backward there, and its forward compiles for 10-20 s per new shape, which
    sampling (a new T every step) would pay again and again. On GPUs `flex` is picked for local and strided
    layers unless there is attention dropout (FlexAttention has none; `attend` then uses `chunked`).
    """
    if kind == "dense" or (kind == "local" and window >= T):
        return "dense"
    if impl != "auto":
        return impl
    if device.type == "cuda" and flex_available():
        return "flex"
    if kind == "local" and T < LOCAL_CPU_MIN_WINDOWS * window:
        return "sdpa"
    return "chunked"


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kind: str,
    window: int,
    impl: str = "auto",
    scale: Optional[float] = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v over (B, H, T, D_K) q, k and (B, H, T, D_V) v, for the layer's kind.

    scale None = 1/sqrt(D_K), as eq. 5; GPT-Neo uses 1.0.
    """
    T = q.shape[-2]
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    chosen = resolve_impl(impl, kind, T, window, q.device)
    if chosen == "flex" and dropout_p > 0.0:
        if impl == "auto":
            chosen = "chunked"
        else:
            raise ConfigError(
                "model.attn_impl=flex has no attention dropout; set model.dropout=0.0 or use attn_impl=chunked."
            )
    if chosen == "dense":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, dropout_p=dropout_p)
    if chosen == "sdpa":
        mask = pattern_mask(kind, T, window, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, dropout_p=dropout_p)
    if chosen == "chunked":
        fn = chunked_local if kind == "local" else chunked_strided
        return fn(q, k, v, window, scale, dropout_p)
    if needs_grad and q.device.type == "cpu":
        raise ConfigError(
            "model.attn_impl=flex cannot train on CPU (FlexAttention has no CPU backward); "
            "use model.attn_impl=auto or chunked."
        )
    return flex(q, k, v, kind, window, scale)


def chunked_local(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, scale: Optional[float], dropout_p: float
) -> torch.Tensor:
    """Local attention in blocks of w queries, each against its own and the previous block of keys.

    Key j is visible from query i iff i - w < j <= i, so every visible key lies in i's block or the one
    before: the work is T/w blocks of w x 2w scores, O(T*w) time and memory. The blocks become a batch
    dimension of one SDPA call with a 4-D boolean mask (the CPU flash kernel takes 2-D and 4-D masks; a 3-D
    one silently falls back to the slow math path). Keys get w zeros in front, so block 0 has a "previous"
    block too, which its mask hides; T is padded at the end to a multiple of w, and those keys come after
    every real query, so the band hides them, and the padded queries are cut off.
    """
    B, H, T, _ = q.shape
    w = min(window, T)  # a band wider than the sequence is plain causal attention over one block
    n = -(-T // w)  # query blocks
    tail = n * w - T
    qb = _blocks(F.pad(q, (0, 0, 0, tail)), w)  # (B, n, H, w, D_K)
    kb = _blocks(F.pad(k, (0, 0, w, tail)), w)  # (B, n + 1, H, w, D_K): block 0 is the zero front pad
    vb = _blocks(F.pad(v, (0, 0, w, tail)), w)
    keys = torch.cat([kb[:, :-1], kb[:, 1:]], dim=3)  # previous block ‖ own block: (B, n, H, 2w, D_K)
    values = torch.cat([vb[:, :-1], vb[:, 1:]], dim=3)
    a = torch.arange(w, device=q.device)[:, None]  # query offset in its block
    c = torch.arange(2 * w, device=q.device)[None, :] - w  # key offset from the block start: -w .. w-1
    band = (c <= a) & (c > a - window)  # i - w < j <= i
    mask = band.expand(n, 1, w, 2 * w).clone()
    mask[0, :, :, :w] = False  # block 0's previous block is padding
    out = F.scaled_dot_product_attention(
        qb.flatten(0, 1),
        keys.flatten(0, 1),
        values.flatten(0, 1),
        attn_mask=mask.repeat(B, 1, 1, 1),
        scale=scale,
        dropout_p=dropout_p,
    )
    return out.unflatten(0, (B, n)).transpose(1, 2).flatten(2, 3)[:, :, :T]  # (B, H, T, D_V)


def _blocks(t: torch.Tensor, w: int) -> torch.Tensor:
    """(B, H, m * w, D) -> (B, m, H, w, D)."""
    return t.unflatten(2, (-1, w)).transpose(1, 2)


def chunked_strided(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, scale: Optional[float], dropout_p: float
) -> torch.Tensor:
    """Strided attention as causal attention within each residue class of positions mod w.

    Query i sees j <= i with j ≡ i (mod w): write i = n w + r; the keys are r, w + r, ..., i, a causal
    prefix of the sequence of positions with the same r. Laying the (padded) sequence out as w sequences
    of length T/w turns the pattern into w small dense causal problems: O(T^2 / w) work. Padding goes at
    the end, after every real position, so causal masking hides it.
    """
    B, H, T, _ = q.shape
    n_rows = -(-T // window)
    pad = n_rows * window - T

    def by_residue(t: torch.Tensor) -> torch.Tensor:  # (B, H, T, D) -> (B, H * w, n_rows, D)
        t = F.pad(t, (0, 0, 0, pad)).unflatten(2, (n_rows, window)).transpose(2, 3)
        return t.flatten(1, 2)

    out = F.scaled_dot_product_attention(
        by_residue(q), by_residue(k), by_residue(v), is_causal=True, scale=scale, dropout_p=dropout_p
    )
    out = out.unflatten(1, (H, window)).transpose(2, 3).flatten(2, 3)  # back to (B, H, padded T, D_V)
    return out[:, :, :T]


def flex_available() -> bool:
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def flex(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kind: str, window: int, scale: Optional[float]
) -> torch.Tensor:
    """FlexAttention: the same pattern as a mask_mod; compiled, it skips the blocks the mask empties."""
    block_mask = _block_mask(kind, q.shape[-2], window, str(q.device))
    return _compiled_flex()(q, k, v, block_mask=block_mask, scale=scale)


@functools.lru_cache(maxsize=None)
def _compiled_flex() -> Callable[..., torch.Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


@functools.lru_cache(maxsize=64)
def _block_mask(kind: str, T: int, window: int, device: str):  # -> BlockMask
    """Built once per (kind, T, w, device): creating a block mask evaluates mask_mod over all T x T pairs."""
    from torch.nn.attention.flex_attention import create_block_mask

    if kind == "local":

        def mask_mod(b, h, i, j):  # type: ignore[no-untyped-def]
            return (j <= i) & (i - j < window)

    else:

        def mask_mod(b, h, i, j):  # type: ignore[no-untyped-def]
            return (j <= i) & ((i - j) % window == 0)

    return create_block_mask(mask_mod, None, None, T, T, device=device)
