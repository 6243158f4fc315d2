"""The LightningDataModule for real corpora: prepared shards read by memmap, or a tokenized stream."""

from __future__ import annotations

import os
from typing import Any, Optional

import lightning as L
import torch
from torch.utils.data import DataLoader

from gptlab.data.position import TrainPosition, pin_memory
from gptlab.data.prepare import load_prepared, prepare
from gptlab.data.streaming import StreamingWindows
from gptlab.data.tokenizers import Tokenizer
from gptlab.data.windows import EpochWindows, RandomWindows, SequentialWindows
from gptlab.errors import ConfigError, invalid_choice

SAMPLING = ("random", "epoch")


class TokenDataModule(L.LightningDataModule):
    """`streaming=False`: `prepare_data` tokenizes the source once into shards under cache_dir (a no-op when
    they exist), training draws random windows (`sampling=random`, as nanoGPT) or an epoch of non-overlapping
    windows (`sampling=epoch`), disjoint across ranks. `streaming=True`: windows are tokenized on the fly, and
    the stream's position is saved in checkpoints (state_dict) so a resumed run continues where it stopped."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        source: Any,
        block_size: int = 256,
        batch_size: int = 32,
        streaming: bool = False,
        cache_dir: str = "data/cache",
        val_fraction: float = 0.01,
        shard_tokens: int = 100_000_000,
        num_proc: Optional[int] = None,
        sampling: str = "random",
        samples_per_epoch: Optional[int] = None,
        val_windows: int = 64,
        verify_sha256: bool = True,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if sampling not in SAMPLING:
            raise invalid_choice("data.sampling", sampling, SAMPLING)
        for name, value in (("batch_size", batch_size), ("block_size", block_size), ("val_windows", val_windows)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"data.{name}={value!r} must be a positive integer.")
        if num_workers < 0:
            raise ConfigError(f"data.num_workers={num_workers!r} must be >= 0.")
        self.tokenizer, self.source, self.block_size, self.batch_size = tokenizer, source, block_size, batch_size
        self.streaming, self.cache_dir = streaming, cache_dir
        self.val_fraction, self.shard_tokens = val_fraction, shard_tokens
        self.num_proc = num_proc or os.cpu_count() or 1
        self.sampling, self.samples_per_epoch, self.val_windows = sampling, samples_per_epoch, val_windows
        self.verify_sha256, self.num_workers, self.seed = verify_sha256, num_workers, seed
        self.stream_positions: dict[int, tuple[int, int, int]] = {}  # this rank's workers → next window's start
        self._loaded_stream_state: Optional[dict[str, Any]] = None
        self.position = TrainPosition()  # prepared shards: where training stopped, for exact resume
        self.splits = None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _rank_world(self) -> tuple[int, int]:
        return (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)

    def prepare_data(self) -> None:
        if not self.streaming:
            prepare(self.source, self.tokenizer, self.cache_dir, self.val_fraction, self.shard_tokens, self.num_proc)

    def setup(self, stage: Optional[str] = None) -> None:
        if self.streaming:
            self._check_stream()
            return
        if self.splits is not None:
            return
        self.splits = load_prepared(self.cache_dir, self.tokenizer, self.verify_sha256)
        rank, world = self._rank_world()
        train = self.splits["train"]
        if self.sampling == "random":
            per_epoch = self.samples_per_epoch or max(1, len(train) // self.block_size)
            self.train_set = RandomWindows(train, self.block_size, per_epoch, self.seed)
        else:
            n = (len(train) - 1) // self.block_size
            self.train_set = EpochWindows(train, self.block_size, self.seed, n_windows=max(world, n - n % world))
        self.val_set = SequentialWindows(self.splits["val"], self.block_size)

    def _stream(self, val: bool, **kwargs: Any) -> StreamingWindows:
        rank, world = self._rank_world()
        return StreamingWindows(self.source, self.tokenizer, self.block_size, self.val_fraction, val=val, rank=rank,
                                world_size=world, **kwargs)

    def _check_stream(self) -> None:
        """Fail at setup, not after an empty epoch, when a split cannot fill one window."""
        for val in (False, True):
            if next(iter(self._stream(val, max_windows=1)), None) is None:
                raise ConfigError(
                    f"the {'val' if val else 'train'} documents of the streamed source "
                    f"{getattr(self.source, 'name', '')!r} hold fewer than block_size+1={self.block_size + 1} tokens "
                    "for this rank; use a smaller block_size, more data, or another data.val_fraction."
                )

    def _loader(self, dataset, sampler=None, num_workers: Optional[int] = None) -> DataLoader:
        workers = self.num_workers if num_workers is None else num_workers
        return DataLoader(dataset, batch_size=self.batch_size, sampler=sampler, num_workers=workers,
                          persistent_workers=workers > 0, drop_last=sampler is not None,
                          pin_memory=pin_memory(self.trainer))

    def train_dataloader(self) -> DataLoader:
        if self.streaming:
            return self._loader(self._stream(False, start=self._start_positions()))
        return self.position.train_loader(self.train_set, self.trainer, self.batch_size, num_workers=self.num_workers,
                                          persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> DataLoader:
        if self.streaming:  # the first val_windows windows of the val documents, read afresh each time
            return self._loader(self._stream(True, max_windows=self.val_windows), num_workers=0)
        return self._loader(self.val_set)

    # --- the stream's position in checkpoints -------------------------------------------------------------

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Streamed batches carry their position as a third element: remember it (training only) and drop it."""
        if not self.streaming:
            return batch
        x, y, position = batch
        if self.trainer is not None and self.trainer.training:
            worker, pass_, record, offset = (int(v) for v in position[-1])
            self.stream_positions[worker] = (pass_, record, offset)
        return x, y

    def _layout(self) -> dict[str, int]:
        _, world = self._rank_world()
        return {"world_size": world, "num_workers": self.num_workers}

    def state_dict(self) -> dict[str, Any]:
        if not self.streaming:
            return self.position.state_dict(self.trainer)  # prepared shards: epoch and batches, as CorpusDataModule
        positions: list[Any] = [self.stream_positions]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            positions = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(positions, self.stream_positions)
        return {"stream": {**self._layout(), "positions": {r: dict(p) for r, p in enumerate(positions)}}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "stream" in state_dict:
            self._loaded_stream_state = state_dict["stream"]
        else:
            self.position.load_state_dict(state_dict)

    def _start_positions(self) -> dict[int, tuple[int, int, int]]:
        saved = self._loaded_stream_state
        if saved is None:
            return {}
        layout = self._layout()
        if {k: saved[k] for k in layout} != layout:
            raise ConfigError(
                f"the checkpoint's stream position was saved with {({k: saved[k] for k in layout})} but this run has "
                f"{layout}; resume with the same trainer.devices/num_nodes and data.num_workers."
            )
        rank, _ = self._rank_world()
        self.stream_positions = {int(w): tuple(p) for w, p in saved["positions"][rank].items()}
        return dict(self.stream_positions)
