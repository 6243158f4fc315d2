"""The LightningDataModule for in-memory corpora: documents → split → tokens → windows."""

from __future__ import annotations

from typing import Any, Optional

import lightning as L
from torch.utils.data import DataLoader

from gptlab.data.corpus import Split, build_split
from gptlab.data.position import TrainPosition, pin_memory
from gptlab.data.sources import SOURCES
from gptlab.data.tokenizers import Tokenizer
from gptlab.data.windows import RandomWindows, SequentialWindows
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
        self.position = TrainPosition()

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

    def train_dataloader(self) -> DataLoader:
        return self.position.train_loader(self.train_set, self.trainer, self.batch_size, **self._loader_kwargs())

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, pin_memory=pin_memory(self.trainer),
                          **self._loader_kwargs())

    def _loader_kwargs(self) -> dict[str, Any]:
        return {"num_workers": self.num_workers, "persistent_workers": self.num_workers > 0}

    def state_dict(self) -> dict[str, Any]:
        """The data position, for exact resume (see TrainPosition)."""
        return self.position.state_dict(self.trainer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.position.load_state_dict(state_dict)
