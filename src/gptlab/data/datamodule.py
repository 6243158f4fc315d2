"""The LightningDataModule for in-memory corpora: documents → split → tokens → windows."""

from __future__ import annotations

from typing import Any, Optional

import lightning as L
import torch
from torch.utils.data import DataLoader

from gptlab.data.corpus import Split, build_split
from gptlab.data.sources import SOURCES
from gptlab.data.tokenizers import Tokenizer
from gptlab.data.windows import EpochSampler, RandomWindows, SequentialWindows
from gptlab.errors import ConfigError, invalid_choice


class CorpusDataModule(L.LightningDataModule):
    """Random training windows and a fixed, complete set of validation windows.

    `samples_per_epoch` only sets how often Lightning's epoch hooks fire: training is bounded by
    `trainer.max_steps`, and every epoch draws fresh windows."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        source: str = "pydocs",
        block_size: int = 256,
        batch_size: int = 32,
        val_fraction: float = 0.05,
        samples_per_epoch: Optional[int] = None,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if source not in SOURCES:
            raise invalid_choice("data.source", source, SOURCES)
        for name, value in (("batch_size", batch_size), ("block_size", block_size)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"data.{name}={value!r} must be a positive integer.")
        if num_workers < 0:
            raise ConfigError(f"data.num_workers={num_workers!r} must be >= 0.")
        self.tokenizer, self.source, self.block_size = tokenizer, source, block_size
        self.batch_size, self.val_fraction, self.num_workers, self.seed = batch_size, val_fraction, num_workers, seed
        self.samples_per_epoch = samples_per_epoch
        self.split: Optional[Split] = None
        self.resume_position: dict[str, int] = {}  # from a checkpoint: where in which epoch training stopped
        self._train_sampler: Optional[EpochSampler] = None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def setup(self, stage: Optional[str] = None) -> None:
        if self.split is not None:
            return
        self.split = build_split(SOURCES[self.source](), self.tokenizer, self.val_fraction)
        per_epoch = self.samples_per_epoch or max(1, len(self.split.train) // self.block_size)
        self.train_set = RandomWindows(self.split.train, self.block_size, per_epoch, self.seed)
        self.val_set = SequentialWindows(self.split.val, self.block_size)

    def _loader(self, dataset, sampler=None) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            drop_last=sampler is not None,
            # Its own generator: creating an iterator then draws no number from the global RNG, which
            # dropout uses, so a resumed run's random stream stays the uninterrupted run's.
            generator=torch.Generator().manual_seed(self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        sampler = EpochSampler(len(self.train_set), rank, world)
        epoch, batches = self.resume_position.get("epoch", 0), self.resume_position.get("batches", 0)
        if batches >= len(sampler) // self.batch_size:  # stopped at an epoch's end: the next one starts afresh
            epoch, batches = epoch + 1, 0
        sampler.epoch, sampler.start = epoch, batches * self.batch_size
        self._train_sampler = sampler
        return self._loader(self.train_set, sampler)

    def state_dict(self) -> dict[str, Any]:
        """The data position for exact resume: the epoch and how many of its batches were trained on. The count
        is the trainer's, not how far the sampler was read: the loader reads ahead of training."""
        if self.trainer is None or self._train_sampler is None:
            return {}
        # The sampler's epoch is the one whose windows the batch counter counts; Lightning's own epoch counters
        # move at different points of the loop depending on where the checkpoint was taken.
        progress = self.trainer.fit_loop.epoch_loop.batch_progress.current
        return {"epoch": self._train_sampler.epoch, "batches": progress.processed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.resume_position = dict(state_dict)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set)
