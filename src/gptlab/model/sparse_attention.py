"""Attention kernels for the per-layer patterns of GPT-3 ([S3]) and the Sparse Transformer.

A layer's kind says which keys j a query i may see (always j <= i; w = model.attn_window):
  dense    every j <= i                                   (eq. 5's causal mask M)
  local    i - w < j <= i, a band of w keys                (GPT-3's "locally banded" layers, GPT-Neo's "local")
  strided  j <= i with (i - j) divisible by w              (Sparse Transformer's strided head; [local, strided]
                                                            is its factorised pattern with stride l = w)

Kernels (model.attn_impl): `sdpa` computes all T x T scores with an explicit mask (the reference; O(T^2));
`chunked` computes only the blocks the pattern touches with plain SDPA calls (O(T*w) for local, O(T^2/w) for
strided; forward and backward on any device); `flex` is FlexAttention with a block mask, compiled (GPUs;
on CPU it has no backward); `flash` is FlashAttention's own sliding window (the optional flash-attn package, CUDA,
bf16/fp16, local layers). `auto` picks per call, see `resolve_impl`. `attend` is the one dispatcher: a
position scheme that biases the scores (ALiBi) passes a `ScoreBias`, which each kernel adds in its own layout.
With document masking (model/documents.py) `attend` also ANDs the pattern with "same document": on GPUs through
FlexAttention with a per-batch block mask; elsewhere the kernel the layer would use without documents, the chunked
kernels with "same document" added to each block's mask (O(T*w) still), `sdpa` with the explicit (B, 1, T, T) mask.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol

import torch
import torch.nn.functional as F

from gptlab.errors import ConfigError
from gptlab.model.documents import Documents


class ScoreBias(Protocol):
    """An additive term on the scores beside the layer's mask (ALiBi's -m_h (i - j)), in each kernel's layout.
    Each method returns the mask with -inf where a pair is not allowed and the bias elsewhere."""

    def pairs(self, q_pos: torch.Tensor, k_pos: torch.Tensor, allowed: torch.Tensor,
              dtype: torch.dtype) -> torch.Tensor: ...  # (H, Tq, Tk) for queries and keys at these positions

    def full(self, kind: str, T: int, window: int, device: torch.device,
             dtype: torch.dtype) -> torch.Tensor: ...  # (1, H, T, T): the `sdpa` kernel's mask

    def band(self, c: int, w: int, device: torch.device,
             dtype: torch.dtype) -> torch.Tensor: ...  # (1, H, c, w + c): added to chunked_local's block mask

    def strided(self, n_rows: int, window: int, device: torch.device,
                dtype: torch.dtype) -> torch.Tensor: ...  # (1, H w, n, n): chunked_strided's residue classes

    def score_mod(self, device: torch.device) -> Callable[..., Any]: ...  # FlexAttention's score_mod

# On CPU, `chunked` beats the band-masked `sdpa` once T reaches about this many windows; below it the dense
# kernel's better constants win. Measured with w=256, H=12, D_K=64, fp32, fwd+bwd, one thread: T=512 sdpa 90 ms
# vs chunked 113 ms; T=768 193 vs 154 ms; T=1024 341 vs 220 ms.
LOCAL_CPU_MIN_WINDOWS = 3


def pattern_mask(kind: str, T: int, window: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """The (T, T) boolean mask of allowed (query i, key j) pairs: True = attend."""
    positions = torch.arange(T, device=device)
    return allowed_pairs(kind, positions, positions, window)


def allowed_pairs(kind: str, q_pos: torch.Tensor, k_pos: torch.Tensor, window: int) -> torch.Tensor:
    """(len(q_pos), len(k_pos)) boolean mask for queries and keys at these absolute positions."""
    return ATTENTION_KINDS[kind].sees(q_pos[:, None], k_pos[None, :], window)


def is_sparse(kind: str) -> bool:
    """Whether a layer of this kind attends to a band of the earlier tokens (local, strided) rather than to all."""
    return kind != "dense"


def computes_densely(kind: str, T: int, window: int) -> bool:
    """Whether a layer of this kind is plain causal attention at context T: dense, or local with a band w >= T."""
    return not is_sparse(kind) or (kind == "local" and window >= T)


def resolve_impl(impl: str, kind: str, T: int, window: int, device: torch.device,
                 dtype: torch.dtype = torch.float32) -> str:
    """The kernel that computes this call: `impl` itself unless it is `auto`.

    auto: dense layers, and local layers whose band covers the whole sequence (w >= T, so local == dense),
    use SDPA's causal kernel ("dense"). On CPU, local layers use `chunked` once T >= 3w and the masked `sdpa`
    below that; strided layers always use `chunked`. FlexAttention is never auto-picked on CPU, with or
    without gradients: it has no backward there, and its forward compiles for 10-20 s per new shape, which
    sampling (a new T every step) would pay again and again. On GPUs, local layers take FlashAttention's own
    window (`flash`) where flash-attn is installed and the inputs are bf16/fp16 (its kernel skips every pair
    outside the band, tile by tile), else `flex` (unless there is attention dropout: FlexAttention has none;
    `attend` then uses `chunked`). Strided layers keep `chunked`, which the doctor measured faster there (H100,
    T=8192, w=256: 0.9 ms vs flex's 1.6 ms fwd+bwd: a strided band of T/w keys per query touches every one of
    flex's 128 x 128 blocks below the diagonal, where chunked's residue classes are small dense problems).
    """
    if computes_densely(kind, T, window):
        return "dense"
    if impl != "auto":
        return impl
    if device.type == "cuda" and kind == "local" and dtype in FLASH_DTYPES and flash_available():
        return "flash"
    if device.type == "cuda" and kind == "local" and flex_available():
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
    bias: Optional[ScoreBias] = None,
    documents: Optional[Documents] = None,
) -> torch.Tensor:
    """softmax(q k^T * scale + mask [+ bias]) v over (B, H, T, D_K) q, k and (B, H, T, D_V) v, for the layer's kind.

    scale None = 1/sqrt(D_K), as eq. 5; GPT-Neo uses 1.0. `documents`: keys of other documents are masked too.
    """
    T = q.shape[-2]
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if documents is not None:
        return _attend_documents(q, k, v, kind, window, impl, scale, dropout_p, bias, documents, needs_grad)
    chosen = resolve_impl(impl, kind, T, window, q.device, q.dtype)
    if chosen == "flash" and (bias is not None or q.shape[-1] != v.shape[-1]):
        chosen = _flash_refused(impl, "ALiBi's bias" if bias is not None else "D_K != D_V")
    chosen = _usable_kernel(chosen, impl, dropout_p, needs_grad, q.device)
    if chosen == "dense" and bias is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, dropout_p=dropout_p)
    if chosen in ("dense", "sdpa"):
        mask = pattern_mask(kind, T, window, q.device) if bias is None else bias.full(kind, T, window, q.device,
                                                                                      q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, dropout_p=dropout_p)
    if chosen == "chunked":
        return ATTENTION_KINDS[kind].chunked(q, k, v, window, scale, dropout_p, bias=bias)
    if chosen == "flash":
        return flash_window(q, k, v, kind, window, scale, dropout_p)
    return flex(q, k, v, kind, window, scale, bias)


def _flash_refused(impl: str, what: str) -> str:
    """`auto` takes flex where flash cannot compute the call; an explicit attn_impl=flash is refused."""
    if impl == "auto":
        return "flex" if flex_available() else "chunked"
    raise ConfigError(f"model.attn_impl=flash cannot compute attention with {what}; use model.attn_impl=auto or flex.")


def _attend_documents(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kind: str, window: int, impl: str, scale: Optional[float],
    dropout_p: float, bias: Optional[ScoreBias], documents: Documents, needs_grad: bool,
) -> torch.Tensor:
    """`attend` within documents: FlexAttention where `auto` would use it for any kind (a GPU, no dropout) or
    attn_impl=flex asks for it; the chunked kernel where the layer would use it without documents (attn_impl=chunked,
    or auto's choice), with "same document" in its block masks; otherwise SDPA with the kind's pattern AND same
    document as an explicit (B, 1, T, T) mask."""
    wants_flex = impl == "flex" or (impl == "auto" and q.device.type == "cuda" and flex_available())
    sees = ATTENTION_KINDS[kind].sees
    if wants_flex and _usable_kernel("flex", impl, dropout_p, needs_grad, q.device) == "flex":
        return flex(q, k, v, kind, window, scale, bias, block_mask=documents.block_mask(kind, window, sees))
    chosen = resolve_impl(impl, kind, q.shape[-2], window, q.device)
    chunked = ATTENTION_KINDS[kind].chunked
    if chunked is not None and (chosen == "chunked" or (chosen == "flex" and impl == "auto")):
        return chunked(q, k, v, window, scale, dropout_p, bias=bias, ids=documents.ids)
    allowed = documents.mask(kind, window, sees)  # (B, 1, T, T)
    mask = allowed
    if bias is not None:  # the bias of the whole window, with -inf also across documents
        mask = bias.full(kind, q.shape[-2], window, q.device, q.dtype).masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, dropout_p=dropout_p)


def _usable_kernel(chosen: str, impl: str, dropout_p: float, needs_grad: bool, device: torch.device) -> str:
    """`chosen`, unless it is FlexAttention where it cannot run: with attention dropout (auto falls back to
    chunked) or for a backward on CPU (auto never picks flex there, so only an explicit attn_impl=flex gets here)."""
    if chosen != "flex":
        return chosen
    if dropout_p > 0.0 and impl == "auto":
        return "chunked"
    refuse_flex(dropout_p, cpu_backward=needs_grad and device.type == "cpu")
    return chosen


def refuse_flex(dropout: float, cpu_backward: bool, accelerator: Optional[str] = None) -> None:
    """Where model.attn_impl=flex cannot run: with attention dropout, for a backward on CPU, or without FlexAttention
    in this torch. The preflight pass asks it before anything is built (`accelerator`: the trainer's, named in the
    message); the kernel asks it again at its call, for callers that never ran the preflight pass."""
    if dropout > 0:
        raise ConfigError(f"model.attn_impl=flex has no attention dropout (model.dropout={dropout}); "
                          "set model.dropout=0.0 or use model.attn_impl=auto or chunked.")
    if cpu_backward:
        run = "" if accelerator is None else f" and this run trains on the CPU (trainer.accelerator={accelerator})"
        raise ConfigError(f"model.attn_impl=flex cannot train on CPU (FlexAttention has no CPU backward){run}; use "
                          "model.attn_impl=auto or chunked.")
    if not flex_available():
        raise ConfigError("model.attn_impl=flex needs torch.nn.attention.flex_attention, which this torch lacks; "
                          "use model.attn_impl=auto or chunked, or torch>=2.5.")


def refuse_flash(strided: bool, on_cpu: bool = False, accelerator: Optional[str] = None) -> None:
    """Where model.attn_impl=flash cannot run: strided layers, a CPU run, flash-attn not installed. Asked by the
    preflight pass (`accelerator`: the trainer's, named in the message) and by the kernel at its call."""
    if strided:
        raise ConfigError("model.attn_impl=flash computes local layers only and model.attn_pattern has strided ones; "
                          "use model.attn_impl=auto (flash for local layers where it can, chunked for strided).")
    if on_cpu:
        raise ConfigError("model.attn_impl=flash needs a CUDA GPU (flash-attn has no CPU kernel) and this run trains "
                          f"on the CPU (trainer.accelerator={accelerator}); use model.attn_impl=auto.")
    if not flash_available():
        raise ConfigError("model.attn_impl=flash needs the flash-attn package, which is not installed; "
                          "pip install flash-attn, or use model.attn_impl=auto.")


def attend_cached(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_start: int,
    k_start: int,
    kind: str,
    window: int,
    impl: str = "auto",
    scale: Optional[float] = None,
    bias: Optional[ScoreBias] = None,
) -> torch.Tensor:
    """Attention for decoding: the queries sit at positions q_start.., the keys (from a KV cache, which for a
    local layer holds only the last keys) at k_start... A prompt that fills an empty cache is an ordinary
    call; otherwise the few new queries get an explicit mask of their kind, which is cheap at this size."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    if q_start == k_start and T_q == T_k:
        return attend(q, k, v, kind, window, impl, scale, bias=bias)
    q_pos = torch.arange(q_start, q_start + T_q, device=q.device)
    k_pos = torch.arange(k_start, k_start + T_k, device=q.device)
    mask = allowed_pairs(kind, q_pos, k_pos, window)
    if bias is not None:
        mask = bias.pairs(q_pos, k_pos, mask, q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def chunked_local(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    scale: Optional[float],
    dropout_p: float,
    bias: Optional[ScoreBias] = None,
    query_block: Optional[int] = None,
    ids: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Local attention in blocks of c queries, each against the w + c keys that can reach it.

    Key j is visible from query i iff i - w < j <= i, so a block of queries s .. s+c-1 needs keys s-w .. s+c-1.
    The blocks become the batch dimension of ONE SDPA call (one large kernel call instead of T/c small ones)
    with a 4-D additive mask, built once per shape and cached (the CPU flash kernel takes 2-D and 4-D masks;
    a 3-D one silently falls back to the slow math path). An explicit mask makes the kernel compute every
    score of the block, masked or not, so the work is (w + c)/w times the band's: c = w/2 (QUERY_BLOCK_DIVISOR)
    does 1.5x the band where c = w did 2x, for keys gathered (w + c)/c times instead of twice, with one
    index_select per tensor (a view where it can be). Keys before position 0 are clamped to 0 and masked; a
    last, partial query block is padded and its padded queries are cut off, so they pass no gradient back.
    A score bias is added to the band mask: inside a block, i - j is the same for every block. With document ids
    (B, T), keys of other documents are masked in each block too (padded queries take the last id, so every row
    keeps a key and no NaN reaches the backward).
    On CUDA the blocks are w queries (c = w): measured on an H200 at T=8192, w=256 (docs/benchmarks.md), fwd+bwd
    0.65 ms against 0.73 ms for c = w/2 and 1.36 ms for `local_block_pairs` (fewer scores, more launches).
    """
    B, H, T, _ = q.shape
    w = min(window, T)  # a band wider than the sequence is plain causal attention
    c = query_block or (w if q.device.type == "cuda" else max(1, w // QUERY_BLOCK_DIVISOR))
    n = -(-T // c)  # query blocks
    # Work in (B, T, H, D): the layout the fused qkv projection produced, so these are mostly views.
    qt = q.transpose(1, 2)
    if n * c > T:
        qt = F.pad(qt, (0, 0, 0, 0, 0, n * c - T))
    qb = qt.reshape(B * n, c, H, -1).transpose(1, 2)  # (B n, H, c, D_K)
    index = _shape_cached(("keys", n, c, w, T, q.device), lambda: _key_index(n, c, w, T, q.device))
    kb = k.transpose(1, 2).index_select(1, index).view(B * n, w + c, H, -1).transpose(1, 2)  # (B n, H, w+c, D_K)
    vb = v.transpose(1, 2).index_select(1, index).view(B * n, w + c, H, -1).transpose(1, 2)
    mask = _shape_cached(("band", B, n, c, w, window, q.device, q.dtype),
                         lambda: _band_mask(B, n, c, w, window, q.device, q.dtype))
    if bias is not None:
        mask = mask + bias.band(c, w, q.device, q.dtype)
    if ids is not None:
        q_ids = torch.cat([ids, ids[:, -1:].expand(B, n * c - T)], dim=1).view(B * n, 1, c, 1)
        k_ids = ids.index_select(1, index).view(B * n, 1, 1, w + c)
        mask = mask.masked_fill(q_ids != k_ids, float("-inf"))
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale, dropout_p=dropout_p)
    return out.transpose(1, 2).reshape(B, n * c, H, -1)[:, :T].transpose(1, 2)  # (B, H, T, D_V)


def local_block_pairs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, scale: Optional[float], dropout_p: float,
    bias: Optional[ScoreBias] = None,
) -> torch.Tensor:
    """Local attention with queries in blocks of w, each against [previous block, own block]: the form whose mask
    is one small (w, 2w) tensor shared by every block and head (query r sees previous-block key s > r and own-block
    key s <= r), so SDPA's fused GPU kernels read it without a per-block mask in memory. The first block has no
    previous one: it is plain causal attention, which takes SDPA's flash kernel. 2x the band's scores, where
    chunked_local's w/2 blocks compute 1.5x with a per-block mask; `scripts/bench_attention.py --device cuda`
    times both. Padding at the end is only ever a future key, hidden by the mask, and its queries are cut off.
    """
    B, H, T, _ = q.shape
    w = min(window, T)
    n = -(-T // w)
    pad = n * w - T
    qt, kt, vt = (F.pad(t.transpose(1, 2), (0, 0, 0, 0, 0, pad)) for t in (q, k, v))  # (B, n w, H, D)
    mask = _shape_cached(("pairs", w, window, q.device, q.dtype), lambda: _pair_mask(w, window, q.device, q.dtype))
    if bias is not None:
        mask = mask + bias.band(w, w, q.device, q.dtype)  # (1, H, w, 2w): i - j = w + r - s in every block

    def heads_first(t: torch.Tensor) -> torch.Tensor:
        return t.transpose(1, 2)

    first = F.scaled_dot_product_attention(
        heads_first(qt[:, :w]), heads_first(kt[:, :w]), heads_first(vt[:, :w]), scale=scale, dropout_p=dropout_p,
        is_causal=bias is None, attn_mask=None if bias is None else mask[..., w:])  # (B, H, w, D_V)
    if n == 1:
        return first[:, :, :T]

    def pairs(t: torch.Tensor) -> torch.Tensor:  # (B, n w, H, D) -> (B (n-1), H, 2w, D): blocks b-1 and b
        blocks = t.unfold(1, 2 * w, w)  # (B, n-1, H, D, 2w), a view
        return blocks.permute(0, 1, 2, 4, 3).reshape(B * (n - 1), H, 2 * w, t.shape[-1])

    rest = F.scaled_dot_product_attention(
        qt[:, w:].reshape(B * (n - 1), w, H, -1).transpose(1, 2), pairs(kt), pairs(vt), attn_mask=mask, scale=scale,
        dropout_p=dropout_p)  # (B (n-1), H, w, D_V)
    rest = rest.unflatten(0, (B, n - 1)).permute(0, 2, 1, 3, 4).reshape(B, H, (n - 1) * w, -1)
    return torch.cat([first, rest], dim=2)[:, :, :T]


def _pair_mask(w: int, window: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, w, 2w) additive mask of local_block_pairs: query r of a block against keys s of the previous block
    (s < w, distance w + r - s) and of its own (s >= w, distance r - (s - w)); 0 where 0 <= distance < window."""
    r = torch.arange(w, device=device)[:, None]
    s = torch.arange(2 * w, device=device)[None, :]
    distance = w + r - s
    allowed = (distance >= 0) & (distance < window)
    return torch.zeros(w, 2 * w, device=device, dtype=dtype).masked_fill_(~allowed, float("-inf"))[None, None]


# Query block c = w / this in chunked_local. Measured at T=8192, w=256, H=12, D_K=64, fp32 fwd+bwd on 2 cores
# (best of 3, ms, a loaded machine): c=256 979, c=128 840, c=64 865, c=32 1064. Smaller blocks waste less of the
# kernel on masked scores but gather more key copies and give the kernel shorter rows.
QUERY_BLOCK_DIVISOR = 2


def _key_index(n: int, c: int, w: int, T: int, device: torch.device) -> torch.Tensor:
    """For each query block b, the positions of keys b c - w .. b c + c - 1, clamped into [0, T)."""
    block = torch.arange(n, device=device)[:, None]
    offset = torch.arange(w + c, device=device)[None, :]
    return (block * c - w + offset).clamp(0, T - 1).flatten()


# Masks built once per shape, shared by every layer and call: a plain dict, not functools caches, because dynamo
# (runtime.compile) reads a dict (the cached tensors become inputs of the graph, no recompile when they change)
# but traces through a functools cache's wrapped function, which would rebuild the mask inside every forward.
# A key missing when a compiled graph is traced is built in that graph once and stored; the next call recompiles
# once and reads it from here. At most _SHAPE_CACHE_SIZE entries (a new sequence length adds one per kind).
_SHAPE_CACHE: dict[tuple[Any, ...], Any] = {}
_SHAPE_CACHE_SIZE = 64


def _shape_cached(key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    value = _SHAPE_CACHE.get(key)
    if value is not None:
        return value
    if torch.compiler.is_compiling():
        # Dynamo cannot ask whether inference mode is on (Lightning validates under it), and a graph traced there
        # makes inference tensors, which a later training step cannot save for backward. So a graph without
        # gradients builds the mask in itself, unstored, and a training graph stores the one it builds.
        if not torch.is_grad_enabled():
            return build()
        value = build()
    else:
        with torch.inference_mode(False):
            value = build()
    if len(_SHAPE_CACHE) >= _SHAPE_CACHE_SIZE:
        _SHAPE_CACHE.pop(next(iter(_SHAPE_CACHE)))
    _SHAPE_CACHE[key] = value
    return value


def _band_mask(
    B: int, n: int, c: int, w: int, window: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """(B n, 1, c, w + c) additive mask: 0 where i - window < j <= i and j >= 0, -inf elsewhere.

    Cached (`_shape_cached`), and made additive here, because SDPA would otherwise convert a boolean mask on every
    call (in forward and again in backward).
    """
    start = torch.arange(n, device=device)[:, None, None] * c  # first query of each block
    i = start + torch.arange(c, device=device)[None, :, None]  # (n, c, 1) query positions
    j = start - w + torch.arange(w + c, device=device)[None, None, :]  # (n, 1, w + c) key positions
    allowed = (j <= i) & (i - j < window) & (j >= 0)
    mask = torch.zeros(allowed.shape, device=device, dtype=dtype).masked_fill_(~allowed, float("-inf"))
    return mask.unsqueeze(1).repeat(B, 1, 1, 1)


def chunked_strided(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, scale: Optional[float], dropout_p: float,
    bias: Optional[ScoreBias] = None, ids: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Strided attention as causal attention within each residue class of positions mod w.

    Query i sees j <= i with j ≡ i (mod w): write i = n w + r; the keys are r, w + r, ..., i, a causal
    prefix of the sequence of positions with the same r. Laying the (padded) sequence out as w sequences
    of length T/w turns the pattern into w small dense causal problems: O(T^2 / w) work. Padding goes at
    the end, after every real position, so causal masking hides it. With document ids (B, T) the causal mask of
    each residue class also requires the same document (padding gets an id of its own).
    """
    B, H, T, _ = q.shape
    n_rows = -(-T // window)
    pad = n_rows * window - T

    def by_residue(t: torch.Tensor) -> torch.Tensor:  # (B, H, T, D) -> (B, H * w, n_rows, D)
        t = F.pad(t, (0, 0, 0, pad)).unflatten(2, (n_rows, window)).transpose(2, 3)
        return t.flatten(1, 2)

    mask = None if bias is None else bias.strided(n_rows, window, q.device, q.dtype)  # causal, with the bias
    if ids is not None:
        mask = _strided_documents(ids, n_rows, window, H, mask)
    out = F.scaled_dot_product_attention(
        by_residue(q), by_residue(k), by_residue(v), attn_mask=mask, is_causal=mask is None, scale=scale,
        dropout_p=dropout_p,
    )
    out = out.unflatten(1, (H, window)).transpose(2, 3).flatten(2, 3)  # back to (B, H, padded T, D_V)
    return out[:, :, :T]


def _strided_documents(ids: torch.Tensor, n_rows: int, window: int, H: int,
                       mask: Optional[torch.Tensor]) -> torch.Tensor:
    """chunked_strided's (B, H w, n, n) mask: causal within each residue class AND same document; `mask`: the
    additive causal mask with a score bias, or None for plain causal."""
    B, T = ids.shape
    by_residue = F.pad(ids, (0, n_rows * window - T), value=-1).view(B, n_rows, window).transpose(1, 2)
    same = by_residue[..., :, None] == by_residue[..., None, :]  # (B, w, n, n)
    same = same[:, None].expand(B, H, window, n_rows, n_rows).reshape(B, H * window, n_rows, n_rows)
    if mask is None:
        causal = torch.ones(n_rows, n_rows, dtype=torch.bool, device=ids.device).tril()
        return same & causal
    return mask.masked_fill(~same, float("-inf"))


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def flex_available() -> bool:
    return _importable("torch.nn.attention.flex_attention")


def flex(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kind: str, window: int, scale: Optional[float],
    bias: Optional[ScoreBias] = None, block_mask: Any = None,
) -> torch.Tensor:
    """FlexAttention: the same pattern as a mask_mod; compiled, it skips the blocks the mask empties.
    `block_mask` replaces the kind's cached one (document masking builds one per batch).

    The block mask is built once per (kind, T, w, device) and kept in `_SHAPE_CACHE` (`flex_block_mask`), eager or
    compiled; flex_attention itself is compiled once (`_compiled_flex`) for eager callers. Inside a model that
    torch.compile traces (runtime.compile=true) the outer compile fuses flex_attention itself."""
    score_mod = None if bias is None else bias.score_mod(q.device)
    if block_mask is None:
        block_mask = flex_block_mask(kind, q.shape[-2], window, q.device)
    if torch.compiler.is_compiling():
        from torch.nn.attention.flex_attention import flex_attention

        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
    return _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


@functools.cache
def _compiled_flex() -> Callable[..., torch.Tensor]:
    """flex_attention compiled once for eager callers; dynamic=False, so a second sequence length gets kernels of
    its own instead of turning every later call into dynamic-shape kernels."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex_block_mask(kind: str, T: int, window: int, device: torch.device):  # -> BlockMask
    """The kind's block mask for T x T, built once per (kind, T, w, device): building it evaluates mask_mod over
    all T x T pairs. Its mask_mod is made once with the mask, so a compiled graph sees the same function each call.
    Blocks are flex's default 128 x 128: for w=256 each query block meets one full key block and two partial ones
    (384 keys computed for 256 wanted), where 64-wide blocks would waste less but run the kernel on smaller tiles."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:  # "cuda" means the current GPU, as tensors' devices name it
        device = torch.device("cuda", torch.cuda.current_device())
    return _shape_cached(("flex", kind, T, window, device.type, device.index),
                         lambda: _build_block_mask(kind, T, window, device))


def _build_block_mask(kind: str, T: int, window: int, device: torch.device):  # -> BlockMask
    from torch.nn.attention.flex_attention import create_block_mask

    sees = ATTENTION_KINDS[kind].sees

    def mask_mod(b, h, i, j):  # type: ignore[no-untyped-def]
        return sees(i, j, window)

    return create_block_mask(mask_mod, None, None, T, T, device=device)


# FlashAttention (the flash-attn package) computes these dtypes only.
FLASH_DTYPES = (torch.bfloat16, torch.float16)


@functools.cache
def flash_available() -> bool:
    """flash-attn is an optional package (CUDA only); gptlab never depends on it."""
    return _importable("flash_attn")


def flash_window(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kind: str, window: int, scale: Optional[float],
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """FlashAttention's sliding window: window_size=(w - 1, 0) lets query i see keys i - w + 1 .. i, the local
    band, and its kernel skips the tiles outside it. flash-attn takes (B, T, H, D), the layout the fused qkv
    projection made, so the transposes here are views."""
    refuse_flash(strided=kind != "local")
    from flash_attn import flash_attn_func

    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=dropout_p,
                          softmax_scale=scale, causal=True, window_size=(window - 1, 0))
    return out.transpose(1, 2)


def pattern_pairs(kind: str, T: int, window: int) -> int:
    """How many (query, key) pairs the kind lets attend over a sequence of T: its share of the score and
    value FLOPs. pattern_pairs("dense", ...) / pattern_pairs(kind, ...) is the FLOPs bound of a kind's speedup."""
    if computes_densely(kind, T, window):
        return T * (T + 1) // 2
    if kind == "local":
        return window * (window + 1) // 2 + (T - window) * window
    full, rest = divmod(T, window)  # strided: query i sees i // w + 1 keys
    return T + window * full * (full - 1) // 2 + rest * full


@dataclass(frozen=True)
class AttentionKind:
    sees: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]  # (query i, key j, w) -> may i attend to j
    chunked: Optional[Callable[..., torch.Tensor]]  # the kernel that computes only the pattern's blocks
    cache_window: bool = False  # decoding keeps only the last w keys in the KV cache


ATTENTION_KINDS = {
    "dense": AttentionKind(sees=lambda i, j, w: j <= i, chunked=None),
    "local": AttentionKind(sees=lambda i, j, w: (j <= i) & (i - j < w), chunked=chunked_local, cache_window=True),
    "strided": AttentionKind(sees=lambda i, j, w: (j <= i) & ((i - j) % w == 0), chunked=chunked_strided),
}
