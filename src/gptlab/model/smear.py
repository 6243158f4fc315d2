"""Two embedding-side choices of the speedrun that read the previous token (model.smear, model.bigram_vocab).

- smear (record #34, 2025-09-18): e_t += lambda sigmoid(w . e_t[:12]) e_(t-1), a gated one-token look-back on the
  embeddings; lambda and w start at 0, so the model starts as without it.
- bigram hash embedding (record #62, 2026-01-19): e_t += B[h(t_(t-1), t_t)], h = (36313 t_t XOR 27191 t_(t-1))
  mod (R - 1), and row R - 1 for a window's first token; B (R x D) starts at 0. The record injects it into every
  block with learned weights (and a sign trick, #83); here it is added once, to the embedding, which x0_mix carries
  to every block. As in the record, a document's first token hashes with the previous document's last.
In KV-cached decoding the token before the new ones comes from the cache (KVCache.last_token).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

SMEAR_CHANNELS = 12  # channels of e_t the smear gate reads (the record's 12)
HASH_A, HASH_B = 36313, 27191  # the record's multipliers


class Smear(nn.Module):
    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.zeros(min(SMEAR_CHANNELS, n_embd)))
        self.weight = nn.Parameter(torch.zeros(1))  # lambda

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.gate)
        nn.init.zeros_(self.weight)

    def forward(self, e: torch.Tensor, before: Optional[torch.Tensor] = None) -> torch.Tensor:
        """e (B, T, D); `before` (B, 1, D) the embedding of the token before e[:, 0] (None: there is none)."""
        prev = e[:, :-1] if before is None else torch.cat([before, e[:, :-1]], dim=1)
        now = e[:, 1:] if before is None else e
        g = self.weight * torch.sigmoid(now[..., : self.gate.numel()] @ self.gate)[..., None]
        mixed = now + g * prev
        return mixed if before is not None else torch.cat([e[:, :1], mixed], dim=1)


def bigram_hash(idx: torch.Tensor, rows: int, before: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Row of each position's (previous, current) token pair; the first position without a `before` token
    (B, 1) gets the reserved row rows - 1."""
    idx = idx.long()
    if before is None:
        first = torch.full_like(idx[:, :1], rows - 1)
        rest = torch.bitwise_xor(HASH_A * idx[:, 1:], HASH_B * idx[:, :-1]) % (rows - 1)
        return torch.cat([first, rest], dim=1)
    prev = torch.cat([before.long(), idx[:, :-1]], dim=1)
    return torch.bitwise_xor(HASH_A * idx, HASH_B * prev) % (rows - 1)


class BigramEmbedding(nn.Module):
    def __init__(self, rows: int, n_embd: int) -> None:
        super().__init__()
        self.rows = rows
        self.table = nn.Embedding(rows, n_embd)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.table.weight)

    def forward(self, idx: torch.Tensor, before: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.table(bigram_hash(idx, self.rows, before))
