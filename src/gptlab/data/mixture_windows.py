"""Training windows of a weighted mixture: which source fills global sample index i, and which of its windows.

The indices are cut into blocks of MIXTURE_BLOCK. Each block gives every source its quota of slots (its weight's
share of the block, rounded by largest remainder so the quotas sum to the block), in an order shuffled by
(seed, block). Index i = b * MIXTURE_BLOCK + j is slot j of block b; if that slot is source s's r-th slot in
the block, i reads window b * quota_s + r of source s. So the map is a pure function of i: every rank, worker
and resumed run agrees on it, a source's windows are read in order (0, 1, 2, ... of its own sampler) without
gaps, and the windows seen per source after N samples are known exactly (`windows_before`).

A source whose windows run out (data.sampling=epoch: each of its windows once) starts its next pass in a new
order (EpochWindows' per-epoch permutation); with random sampling a source never runs out.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

MIXTURE_BLOCK = 1000  # samples per block: the weights hold exactly over each block of this many windows


def quotas(weights: Sequence[float], block: int = MIXTURE_BLOCK) -> np.ndarray:
    """Slots per source in a block: block * w / sum(w), rounded down, and the leftover slots to the largest
    remainders (ties to the earlier source)."""
    share = np.asarray(weights, dtype=np.float64) / float(sum(weights)) * block
    counts = np.floor(share).astype(np.int64)
    leftover = block - int(counts.sum())
    order = sorted(range(len(share)), key=lambda s: (-(share[s] - counts[s]), s))
    counts[order[:leftover]] += 1
    return counts


class MixedWindows(Dataset):
    """Global index -> (x, y) of the source the mixture assigns it. `datasets` are each source's training
    windows, indexed from 0 upwards without end (RandomWindows or EpochWindows)."""

    def __init__(self, datasets: Sequence[Dataset], weights: Sequence[float], samples_per_epoch: int,
                 seed: int = 0) -> None:
        self.datasets, self.samples_per_epoch, self.seed = list(datasets), samples_per_epoch, seed
        self.quota = quotas(weights)

    def __len__(self) -> int:
        return self.samples_per_epoch

    def set_epoch_windows(self, n: int) -> None:
        """A resumed run keeps the epoch length its checkpoint was trained with (gptlab.data.position)."""
        self.samples_per_epoch = n

    @functools.lru_cache(maxsize=4)  # noqa: B019 (a few blocks per instance, which lives for the whole run)
    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(source of each slot, its rank among that source's slots in the block)."""
        slots = np.repeat(np.arange(len(self.quota)), self.quota)
        slots = np.random.default_rng([self.seed, b]).permutation(slots)
        rank = np.empty_like(slots)
        for s in range(len(self.quota)):
            rank[slots == s] = np.arange(int(self.quota[s]))
        return slots, rank

    def locate(self, i: int) -> tuple[int, int]:
        """(source, index into that source's windows) of global sample i."""
        b, j = divmod(i, MIXTURE_BLOCK)
        slots, rank = self._block(b)
        s = int(slots[j])
        return s, b * int(self.quota[s]) + int(rank[j])

    def windows_before(self, n: int) -> np.ndarray:
        """Windows read from each source by global samples 0 .. n-1."""
        b, j = divmod(n, MIXTURE_BLOCK)
        slots, _ = self._block(b)
        return b * self.quota + np.bincount(slots[:j], minlength=len(self.quota))

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s, k = self.locate(i)
        return self.datasets[s][k]
