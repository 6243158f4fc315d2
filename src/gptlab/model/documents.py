"""Document masking: a packed window holds several documents, and with masking each token attends only to the
earlier tokens of its own document, and its position counts from its document's first token.

The data side hands the model one document id per token (gptlab.data.documents); `Documents` turns them into
what the layers need, once per forward: each token's position inside its document (for the learned and
sinusoidal tables and RoPE) and, per attention kind, the mask of allowed pairs. Every kind's pattern
(sparse_attention.ATTENTION_KINDS) depends on i - j alone, and so does ALiBi's bias, so ANDing the pattern with
"same document" gives each document exactly what it would get alone in a window of its own.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

Sees = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]  # (query i, key j, w) -> may i attend to j


def positions_in_documents(ids: torch.Tensor) -> torch.Tensor:
    """(B, T) offset of each token from the first token of its document (ids nondecreasing along T)."""
    T = ids.shape[-1]
    index = torch.arange(T, device=ids.device).expand_as(ids)
    starts = torch.ones_like(ids, dtype=torch.bool)
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=-1).values  # each token's doc start
    return index - first


class Documents:
    """Per-batch document structure, made once in GPT.forward and handed to every block. The masks are kept per
    (kind, window), so layers of the same kind share one."""

    def __init__(self, ids: torch.Tensor) -> None:
        if ids.dim() != 2:
            raise ValueError(f"document ids must be (batch, time), got shape {tuple(ids.shape)}")
        self.ids = ids
        self.positions = positions_in_documents(ids)
        self._masks: dict[tuple[Any, ...], Any] = {}

    def mask(self, kind: str, window: int, sees: Sees) -> torch.Tensor:
        """(B, 1, T, T) boolean: the kind's pattern AND same document; True = attend (SDPA's explicit mask)."""
        key = ("dense mask", kind, window)
        if key not in self._masks:
            T = self.ids.shape[-1]
            pos = torch.arange(T, device=self.ids.device)
            same = self.ids[:, :, None] == self.ids[:, None, :]
            self._masks[key] = (sees(pos[:, None], pos[None, :], window) & same)[:, None]
        return self._masks[key]

    def block_mask(self, kind: str, window: int, sees: Sees):  # -> BlockMask
        """FlexAttention's block mask for this batch: mask_mod is the kind's `sees` AND same document, so blocks
        that straddle no boundary keep the kind's sparsity and blocks across documents are skipped."""
        key = ("block mask", kind, window)
        if key not in self._masks:
            from torch.nn.attention.flex_attention import create_block_mask

            ids = self.ids

            def mask_mod(b, h, i, j):  # type: ignore[no-untyped-def]
                return sees(i, j, window) & (ids[b, i] == ids[b, j])

            B, T = ids.shape
            self._masks[key] = create_block_mask(mask_mod, B, None, T, T, device=str(ids.device))
        return self._masks[key]
