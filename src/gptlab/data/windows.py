"""Datasets of (input, target) windows cut from a 1-D token array (in memory or a memmap).

Each item is block_size+1 contiguous tokens split into x = w[:-1], y = w[1:].
"""

from __future__ import annotations

from typing import Iterator, Optional

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from gptlab.errors import ConfigError


def _check_length(tokens: np.ndarray, block_size: int, what: str) -> None:
    if len(tokens) < block_size + 1:
        fits = fitting_block_size(len(tokens))
        smaller = f"model.block_size={fits} (the largest power of two that fits) or " if fits else ""
        raise ConfigError(
            f"the {what} split has {len(tokens)} tokens, fewer than model.block_size+1={block_size + 1}; "
            f"use {smaller}a larger corpus."
        )


def fitting_block_size(tokens: int) -> int:
    """The largest power-of-two block size whose windows (block_size + 1 tokens) `tokens` holds; 0 if none."""
    return 1 << ((tokens - 1).bit_length() - 1) if tokens >= 2 else 0


def _as_pair(window: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.from_numpy(window.astype(np.int64))
    return w[:-1], w[1:]


class RandomWindows(Dataset):
    """Windows at random starts (as nanoGPT samples), but reproducible: the window of global sample index i
    is drawn from a generator seeded with (seed, i), so every rank, worker or resumed run agrees on it.
    `EpochSampler` hands out the indices; an epoch is `samples_per_epoch` of them."""

    def __init__(self, tokens: np.ndarray, block_size: int, samples_per_epoch: int, seed: int = 0) -> None:
        _check_length(tokens, block_size, "train")
        self.tokens, self.block_size, self.samples_per_epoch, self.seed = tokens, block_size, samples_per_epoch, seed

    def __len__(self) -> int:
        return self.samples_per_epoch

    def set_epoch_windows(self, n: int) -> None:
        """A resumed run keeps the epoch length its checkpoint was trained with (gptlab.data.position)."""
        self.samples_per_epoch = n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, i])
        start = int(rng.integers(0, len(self.tokens) - self.block_size))
        return _as_pair(self.tokens[start : start + self.block_size + 1])


class SequentialWindows(Dataset):
    """Non-overlapping windows covering the array once: a fixed, complete evaluation set."""

    def __init__(self, tokens: np.ndarray, block_size: int) -> None:
        _check_length(tokens, block_size, "val")
        self.tokens, self.block_size = tokens, block_size

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.block_size
        return _as_pair(self.tokens[start : start + self.block_size + 1])


class EpochSampler(Sampler[int]):
    """Global sample indices for one rank: epoch e covers e*N .. (e+1)*N-1, dealt round-robin to ranks.

    Written by hand (instead of Lightning's DistributedSampler) because it must move to fresh indices every
    epoch without shuffling a list of N, and ranks must stay disjoint; the trainer calls `set_epoch`.
    Rank r of W takes positions r, r+W, r+2W, ... of the epoch, so after any number of micro-batches exactly a
    prefix of the epoch is consumed, whatever W: `start` counts that prefix (a multiple of W), and a run resumed
    on any number of ranks continues after it. An epoch uses its first `used` positions: N rounded down to whole
    optimizer steps of `step_windows` (W x micro-batch x accumulation) windows, so no step is short and the epoch
    ends at the same window on every layout of the step. `len` stays this rank's full share so Lightning's batch
    counters agree."""

    def __init__(self, samples_per_epoch: int, rank: int = 0, world_size: int = 1, epoch: int = 0,
                 start: int = 0, step_windows: Optional[int] = None) -> None:
        self.samples_per_epoch, self.rank, self.world_size = samples_per_epoch, rank, world_size
        step = step_windows or world_size
        self.used = samples_per_epoch // step * step
        self.epoch, self.start = epoch, start
        self.resumed = False  # set by a resume: `epoch` is the checkpoint's, whatever Lightning numbers it
        self.lightning_epoch: Optional[int] = None  # Lightning's number for `epoch`, once it has called set_epoch

    def set_epoch(self, epoch: int) -> None:
        """Lightning's epoch number. A resumed sampler keeps its checkpoint's epoch and follows Lightning's count
        from there: Lightning counts the epoch a run stopped in at max_steps as finished, the data position does
        not, so a run trained further from its final checkpoint continues that epoch."""
        if self.lightning_epoch is not None:
            known = self.lightning_epoch
        else:
            known = epoch if self.resumed else self.epoch
        self.lightning_epoch = epoch
        if epoch != known:
            self.epoch, self.start = self.epoch + epoch - known, 0  # the skip belongs to the resumed epoch only

    def __len__(self) -> int:
        return self.used // self.world_size

    def __iter__(self) -> Iterator[int]:
        offset = self.epoch * self.samples_per_epoch
        return iter(range(offset + self.start + self.rank, offset + self.used, self.world_size))


class EpochWindows(Dataset):
    """The array cut into non-overlapping windows (stride block_size), visited once per epoch in an order
    shuffled per epoch: global index i is window perm_e[i mod n] of epoch e = i // n. With `EpochSampler`
    dealing indices round-robin, ranks read disjoint windows. `n_windows` (all windows unless given) does not
    depend on the number of ranks, so neither does the order."""

    def __init__(self, tokens: np.ndarray, block_size: int, seed: int = 0, n_windows: int | None = None) -> None:
        _check_length(tokens, block_size, "train")
        self.tokens, self.block_size, self.seed = tokens, block_size, seed
        available = (len(tokens) - 1) // block_size
        self.n_windows = available if n_windows is None else min(n_windows, available)
        self._perm: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.n_windows

    def set_epoch_windows(self, n: int) -> None:
        """A resumed run keeps the epoch length its checkpoint was trained with (gptlab.data.position): older
        gptlab trimmed it to a multiple of the ranks, and the permutation depends on it."""
        self.n_windows, self._perm = n, None

    def window_start(self, i: int) -> int:
        epoch, j = divmod(i, self.n_windows)
        if self._perm is None or self._perm[0] != epoch:
            self._perm = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.n_windows))
        return int(self._perm[1][j]) * self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = self.window_start(i)
        return _as_pair(self.tokens[start : start + self.block_size + 1])
