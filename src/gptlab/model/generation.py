"""Autoregressive decoding: greedy (eq. 11), temperature sampling ([S1]), top-k, top-p and
beam search ([S2]), with a KV cache so each new token costs one position.

Absolute positions tie a cached key to the position it was computed at, so once a sequence is longer
than block_size the context window slides and every step recomputes the last block_size tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol

import torch

from gptlab.errors import ConfigError
from gptlab.model.config import GPTConfig


class GPT(Protocol):
    """What decoding needs of a model (gptlab.model.GPT has it). A protocol rather than an import: gpt.py builds
    on this module for GPT.generate, so importing GPT here would make the two modules a cycle."""

    config: GPTConfig
    training: bool

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...

    def __call__(self, idx: torch.Tensor, caches: Any = None, last_only: bool = False) -> torch.Tensor: ...

    def new_caches(self, batch: int, max_len: int) -> list[Any]: ...


@dataclass(frozen=True)
class SamplingOptions:
    temperature: float = 1.0  # 0 = greedy argmax; T → 0 is argmax ([S1])
    top_k: Optional[int] = None  # sample among the k most likely ids
    top_p: Optional[float] = None  # sample among the fewest ids whose probability reaches p (nucleus)
    num_beams: int = 1  # > 1: beam search over the model's log-probabilities
    eos_token_id: Optional[int] = None  # a row that emits it stops (and is padded with it)
    use_cache: bool = True  # False recomputes the whole context every step (the reference)

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ConfigError(f"temperature={self.temperature!r} must be >= 0 (0 = greedy).")
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError(f"top_k={self.top_k!r} must be >= 1, or null for no top-k filtering.")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p={self.top_p!r} must be in (0, 1], or null for no nucleus filtering.")
        if self.num_beams < 1:
            raise ConfigError(f"num_beams={self.num_beams!r} must be >= 1 (1 = no beam search).")
        if self.num_beams > 1 and (self.top_k is not None or self.top_p is not None):
            given = " ".join(f"{k}=null" for k in ("top_k", "top_p") if getattr(self, k) is not None)
            raise ConfigError(f"num_beams={self.num_beams} is deterministic beam search; top_k and top_p apply "
                              f"to sampling only: set `{given}`, or num_beams=1.")


class _Decoder:
    """Last-position logits of a growing sequence, through the KV cache or by full recompute."""

    def __init__(self, model: GPT, batch: int, total_len: int, use_cache: bool) -> None:
        self.model, self.block_size = model, model.config.block_size
        self.caches = model.new_caches(batch, min(total_len, self.block_size)) if use_cache else None
        self.seen = 0  # tokens of the sequence already in the caches

    def logits(self, seq: torch.Tensor) -> torch.Tensor:
        if self.caches is not None and seq.shape[1] <= self.block_size:
            logits = self.model(seq[:, self.seen :], self.caches, last_only=True)
            self.seen = seq.shape[1]
        else:  # no cache, or the window slid past block_size: the cached positions are stale
            self.caches = None
            logits = self.model(seq[:, -self.block_size :], last_only=True)
        return logits[:, -1, : self.model.config.vocab_size].float()  # padded ids are never generated

    def reorder(self, rows: torch.Tensor) -> None:
        for cache in self.caches or []:
            cache.reorder(rows)


def filter_logits(logits: torch.Tensor, top_k: Optional[int], top_p: Optional[float]) -> torch.Tensor:
    """Set the logits outside the top-k and outside the top-p nucleus to -inf; the best id always stays."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        drop_sorted = probs.cumsum(dim=-1) - probs >= top_p  # the mass before this id already reaches p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _pick(logits: torch.Tensor, opts: SamplingOptions, generator: Optional[torch.Generator]) -> torch.Tensor:
    if opts.temperature == 0:
        return logits.argmax(dim=-1)
    probs = filter_logits(logits / opts.temperature, opts.top_k, opts.top_p).softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def generate(model: GPT, idx: torch.Tensor, max_new_tokens: int, opts: SamplingOptions,
             generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Return idx (B, T) followed by up to max_new_tokens ids per row; stops early once every row hit EOS."""
    if max_new_tokens < 0:
        raise ConfigError(f"max_new_tokens={max_new_tokens!r} must be >= 0.")
    was_training = model.training
    model.eval()
    try:
        if opts.num_beams > 1:
            return _beam_search(model, idx, max_new_tokens, opts)
        return _sample(model, idx, max_new_tokens, opts, generator)
    finally:
        model.train(was_training)


def _sample(model: GPT, idx: torch.Tensor, max_new_tokens: int, opts: SamplingOptions,
            generator: Optional[torch.Generator]) -> torch.Tensor:
    decoder = _Decoder(model, idx.shape[0], idx.shape[1] + max_new_tokens, opts.use_cache)
    seq, eos = idx, opts.eos_token_id
    finished = torch.zeros(idx.shape[0], dtype=torch.bool, device=idx.device)
    for _ in range(max_new_tokens):
        token = _pick(decoder.logits(seq), opts, generator)
        if eos is not None:
            token = token.masked_fill(finished, eos)
            finished |= token == eos
        seq = torch.cat([seq, token[:, None]], dim=1)
        if eos is not None and bool(finished.all()):
            break
    return seq


def _beam_search(model: GPT, idx: torch.Tensor, max_new_tokens: int, opts: SamplingOptions) -> torch.Tensor:
    """Keep the num_beams highest sums of log-probabilities per row; return the best beam.

    A beam that emitted EOS is finished: it extends only with EOS at no cost, so it keeps competing
    with its final score (no length penalty).
    """
    B, K, eos = idx.shape[0], opts.num_beams, opts.eos_token_id
    seq = idx.repeat_interleave(K, dim=0)  # (B·K, T), the beams of row b are rows b·K … b·K + K - 1
    decoder = _Decoder(model, B * K, idx.shape[1] + max_new_tokens, opts.use_cache)
    scores = torch.full((B, K), float("-inf"), device=idx.device)
    scores[:, 0] = 0.0  # all beams start equal: expand only the first, or the first step picks K copies
    finished = torch.zeros(B * K, dtype=torch.bool, device=idx.device)
    for _ in range(max_new_tokens):
        logp = decoder.logits(seq).log_softmax(dim=-1)
        V = logp.shape[-1]
        if eos is not None:
            logp[finished] = float("-inf")
            logp[finished, eos] = 0.0
        candidates = (scores.reshape(-1, 1) + logp).reshape(B, K * V)
        scores, best = candidates.topk(K, dim=-1)  # sorted: beam 0 is the best
        rows = (torch.arange(B, device=idx.device)[:, None] * K + best // V).reshape(-1)
        token = (best % V).reshape(-1, 1)
        seq = torch.cat([seq[rows], token], dim=1)
        decoder.reorder(rows)
        if eos is not None:
            finished = finished[rows] | (token.squeeze(1) == eos)
            if bool(finished.all()):
                break
    return seq.reshape(B, K, -1)[:, 0]
