"""How a token learns where it is, chosen by model.pos_emb from one table.

An absolute scheme adds a vector per position to the token embedding: learned (eq. 2, Enc+(X) = X E_1 + P E_2)
or the original Transformer's fixed sinusoids ([S2]) times model.sinusoidal_scale. A relative one acts inside
attention instead: RoPE (rope.py) rotates queries and keys, ALiBi (alibi.py) adds a distance bias to the scores.
`none` uses nothing: the causal mask alone tells positions apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import nn

from gptlab.model.alibi import ALiBi
from gptlab.model.sparse_attention import ScoreBias


def sinusoidal_table(n_positions: int, dim: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)); handles odd D."""
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    table = torch.zeros(n_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table.float()


class LearnedPositions(nn.Embedding):
    """E_2: one trained vector per position (its weight is the state_dict's `pos_emb.weight`)."""

    def forward(self, start: int, length: int) -> torch.Tensor:  # type: ignore[override]
        return self.weight[start : start + length]

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """The vectors of arbitrary (B, T) positions: document masking restarts them at each document."""
        return self.weight[positions]


class SinusoidalPositions(nn.Module):
    """The fixed table times `scale`: no parameters, and not in the state_dict (a function of the shape and the
    config, rebuilt on load). Vaswani et al. (2017, §3.4) multiply the embeddings by sqrt(D) before adding the
    table; scaling the table by 1/sqrt(D) instead gives the same token-to-position ratio while the residual stream
    keeps the size every other pos_emb gives it, and a tied head stays W_head = E_1^T unchanged (docs/model.md)."""

    def __init__(self, n_positions: int, dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_table(n_positions, dim) * scale, persistent=False)

    def forward(self, start: int, length: int) -> torch.Tensor:
        return self.table[start : start + length]

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions]


@dataclass(frozen=True)
class PositionScheme:
    # the GPTConfig -> the table added to X E_1 (typed Any: config.py builds its choices from POSITIONS, so this module
    # does not import it)
    absolute: Optional[Callable[[Any], nn.Module]] = None
    parameters: Callable[[int, int], int] = lambda block_size, n_embd: 0  # trained weights of `absolute`
    rotary: bool = False  # queries and keys turn by their position (rope.py)
    score_bias: Optional[Callable[[int], ScoreBias]] = None  # (n_head) -> a bias on the attention scores


POSITIONS = {
    "learned": PositionScheme(absolute=lambda cfg: LearnedPositions(cfg.block_size, cfg.n_embd),
                              parameters=lambda block_size, n_embd: block_size * n_embd),
    "sinusoidal": PositionScheme(absolute=lambda cfg: SinusoidalPositions(cfg.block_size, cfg.n_embd,
                                                                          cfg.sinusoidal_mult)),
    "none": PositionScheme(),
    "rope": PositionScheme(rotary=True),
    "alibi": PositionScheme(score_bias=ALiBi),
}
