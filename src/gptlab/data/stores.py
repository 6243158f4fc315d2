"""Token stores: where GPTDataModule's tokens live. One interface, three stores, chosen by `data.store`:

- `memory`: the source is tokenized when training starts and held in RAM (small corpora: the built-in pydocs);
- `prepared`: tokenized once into shards (scripts/prepare_data.py, or `prepare_data` at fit start), memmapped;
- `streaming`: tokenized on the fly from a streamed `datasets` dataset; nothing is written to disk.

All three split documents by gptlab.data.split's rule, so a corpus has one validation set whichever store
reads it. Memory and prepared hand out the same windows (random or epoch sampling, ranks disjoint, the data
position saved for exact resume); streaming saves the stream's position per worker instead.
"""

from __future__ import annotations

import hashlib
import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from gptlab.data.position import TrainPosition, pin_memory
from gptlab.data.prepare import load_prepared, prepare, prepared_dir, read_json, tokenizer_identity
from gptlab.data.shards import token_dtype
from gptlab.data.split import SPLITS, check_splits_filled, check_val_fraction, doc_batches, encode_batches
from gptlab.data.stream_identity import check_same_stream, stream_identity
from gptlab.data.streaming import StreamingWindows
from gptlab.data.tokenizers import Tokenizer
from gptlab.data.windows import EpochWindows, RandomWindows, SequentialWindows, fitting_block_size
from gptlab.errors import ConfigError

SAMPLING = ("random", "epoch")
DATA_IDENTITY = "data"  # the key of the train tokens' identity in a window store's saved state


@dataclass(frozen=True)
class DataSettings:
    """The data config's fields (conf/data/base.yaml documents each)."""

    block_size: int
    batch_size: int
    val_fraction: float
    num_workers: int
    seed: int
    sampling: str = "random"
    samples_per_epoch: Optional[int] = None
    cache_dir: Optional[str] = None
    shard_tokens: int = 100_000_000
    num_proc: Optional[int] = None
    verify_sha256: bool = True
    val_windows: int = 64


def rank_world(trainer: Any) -> tuple[int, int]:
    return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)


class TokenStore(ABC):
    """What GPTDataModule asks of a store. `trainer` is the attached Lightning Trainer, or None outside fit."""

    name: str

    def __init__(self, source: Any, tokenizer: Tokenizer, settings: DataSettings) -> None:
        self.source, self.tokenizer, self.settings = source, tokenizer, settings

    def prepare(self) -> None:  # noqa: B027 (optional hook: only the prepared store has work here)
        """Once per node before setup (Lightning's prepare_data): work whose result every rank reads."""

    @abstractmethod
    def setup(self, trainer: Any) -> None: ...

    @abstractmethod
    def train_dataloader(self, trainer: Any) -> DataLoader: ...

    @abstractmethod
    def val_dataloader(self, trainer: Any) -> DataLoader: ...

    @abstractmethod
    def state_dict(self, trainer: Any) -> dict[str, Any]:
        """The training data position, saved in checkpoints for exact resume."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def on_before_batch_transfer(self, batch: Any, trainer: Any) -> Any:
        return batch

    def known_epoch_windows(self) -> Optional[int]:
        """The training windows of one epoch, where known before training (None: a stream, which repeats pass after
        pass without an epoch, so any micro-batch fills its steps)."""
        return None

    def _refuse(self, state: dict[str, Any], saved_by: str) -> None:
        raise ConfigError(
            f"the checkpoint's data position was saved with data.store={saved_by} but this run has "
            f"data.store={self.name}; resume with the store the run was started with."
        )

    def _loader(self, dataset: Dataset, trainer: Any, num_workers: Optional[int] = None) -> DataLoader:
        workers = self.settings.num_workers if num_workers is None else num_workers
        # Its own generator, as the train loader's (position.py): starting a validation then draws no number from
        # the global RNG that dropout uses, so a validation run again on resume (one a preemption cut short)
        # leaves the training's random stream as the uninterrupted run's.
        return DataLoader(dataset, batch_size=self.settings.batch_size, num_workers=workers,
                          persistent_workers=workers > 0, pin_memory=pin_memory(trainer),
                          generator=torch.Generator().manual_seed(0))


def check_same_tokens(saved: dict[str, Any], now: dict[str, Any], what: str) -> None:
    """A saved data position counts windows of the train tokens `saved` describes: refuse to continue it on others."""
    if saved != now:
        raise ConfigError(
            f"the checkpoint's data position counts windows of other train tokens than {what} now holds "
            f"({saved['train_tokens']} tokens, sha256 {saved['sha256'][:12]} then; {now['train_tokens']} tokens, "
            f"sha256 {now['sha256'][:12]} now): the source was changed and tokenized again since, so continuing "
            "would train on other text than the position says. Restore the source as it was (its data is prepared "
            "again to the same tokens) to continue this run; or start over on the new data with resume=restart, or "
            "with a new hydra.run.dir."
        )


class WindowStore(TokenStore):
    """Train and val token arrays cut into windows: random starts (nanoGPT) or an epoch of non-overlapping
    windows, dealt disjointly to ranks; the epoch and batch reached are the resume position."""

    def __init__(self, source: Any, tokenizer: Tokenizer, settings: DataSettings) -> None:
        super().__init__(source, tokenizer, settings)
        self.tokens: Optional[dict[str, Any]] = None
        self.position = TrainPosition()
        self._identity: Optional[dict[str, Any]] = None

    @abstractmethod
    def load(self) -> dict[str, Any]:
        """{"train": tokens, "val": tokens}: 1-D arrays (or ShardedTokens) of token ids."""

    def setup(self, trainer: Any) -> None:
        if self.tokens is not None:
            return
        self.tokens = self.load()
        s, train = self.settings, self.tokens["train"]
        if s.sampling == "random":
            self.train_set = RandomWindows(train, s.block_size, self.epoch_windows(len(train)), s.seed)
        else:
            self.train_set = EpochWindows(train, s.block_size, s.seed)
        self.val_set = SequentialWindows(self.tokens["val"], s.block_size)

    def epoch_windows(self, train_tokens: int) -> int:
        """Training windows per epoch over `train_tokens` tokens: data.samples_per_epoch (random sampling; null: one
        window per block_size tokens), or every whole non-overlapping window (epoch sampling, EpochWindows)."""
        s = self.settings
        if s.sampling == "random":
            return s.samples_per_epoch or max(1, train_tokens // s.block_size)
        return max(0, (train_tokens - 1) // s.block_size)

    def known_epoch_windows(self) -> Optional[int]:
        """The epoch's training windows, learnt before training without writing anything: from the setting, the
        prepared manifest, or by tokenizing a memory store's corpus (what its setup does anyway); None where only
        preparing the corpus would tell (a prepared store without its shards)."""
        s = self.settings
        if s.sampling == "random" and s.samples_per_epoch:
            return s.samples_per_epoch
        tokens = self.train_tokens_before_setup()
        return None if tokens is None else self.epoch_windows(tokens)

    def train_tokens_before_setup(self) -> Optional[int]:
        return len(self.load()["train"])

    def train_dataloader(self, trainer: Any) -> DataLoader:
        workers = self.settings.num_workers
        return self.position.train_loader(self.train_set, trainer, self.settings.batch_size,
                                          trimmed_before=self.settings.sampling == "epoch", num_workers=workers,
                                          persistent_workers=workers > 0)

    def val_dataloader(self, trainer: Any) -> DataLoader:
        return self._loader(self.val_set, trainer)

    def train_digest(self) -> str:
        """sha256 of the train tokens (the prepared store reads its shards' from the manifest)."""
        assert self.tokens is not None
        return hashlib.sha256(np.ascontiguousarray(self.tokens["train"])).hexdigest()

    def identity(self) -> dict[str, Any]:
        """What the train tokens are, saved beside the data position: a position counts windows of these tokens,
        so continuing it over other ones (the sources edited and prepared again) trains on other text."""
        if self._identity is None:
            assert self.tokens is not None
            self._identity = {"train_tokens": len(self.tokens["train"]), "sha256": self.train_digest()}
        return self._identity

    def state_dict(self, trainer: Any) -> dict[str, Any]:
        position = self.position.state_dict(trainer)
        return {**position, DATA_IDENTITY: self.identity()} if position and self.tokens is not None else position

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "stream" in state:
            self._refuse(state, "streaming")
        if "mixture" in state:
            raise ConfigError("the checkpoint was trained on a mixture (data.source.sources) but this run reads one "
                              "corpus; resume with the mixture's data= config.")
        state = dict(state)
        saved = state.pop(DATA_IDENTITY, None)  # None: a checkpoint from before it was saved
        if saved is not None and self.tokens is not None:
            check_same_tokens(saved, self.identity(), f"data.store={self.name}")
        self.position.load_state_dict(state)


class MemoryStore(WindowStore):
    """Tokenized at setup and held in RAM: for corpora of a few MB, where shards on disk would buy nothing."""

    name = "memory"

    def load(self) -> dict[str, np.ndarray]:
        check_val_fraction(self.settings.val_fraction)
        parts: dict[str, list[np.ndarray]] = {split: [] for split in SPLITS}
        batches = doc_batches(self.source.documents())
        for encoded in encode_batches(batches, self.tokenizer, self.settings.val_fraction,
                                      self.settings.num_proc or 1):
            for split, (ids, _) in encoded.items():
                parts[split].append(ids)
        dtype = token_dtype(self.tokenizer.vocab_size)
        tokens = {split: np.concatenate(p or [np.empty(0, np.uint32)]).astype(dtype) for split, p in parts.items()}
        check_splits_filled({s: len(t) for s, t in tokens.items()}, repr(self.source.describe()),
                            self.settings.val_fraction, self.source.documents)
        return tokens


class PreparedStore(WindowStore):
    """Shards under `cache_dir/<tokenizer>/`, written once by `prepare` and memmapped (sha256-checked) at setup."""

    name = "prepared"

    def __init__(self, source: Any, tokenizer: Tokenizer, settings: DataSettings) -> None:
        if not settings.cache_dir:
            raise ConfigError("data.cache_dir is not set; data.store=prepared writes its shards there.")
        super().__init__(source, tokenizer, settings)

    def prepare(self) -> None:
        s = self.settings
        prepare(self.source, self.tokenizer, s.cache_dir, s.val_fraction, s.shard_tokens, s.num_proc or os.cpu_count()
                or 1)

    def load(self) -> dict[str, Any]:
        return load_prepared(self.settings.cache_dir, self.tokenizer, self.settings.verify_sha256)

    def train_tokens_before_setup(self) -> Optional[int]:
        """From the manifest, when the shards were prepared with this tokenizer (None: not prepared yet)."""
        path = prepared_dir(self.settings.cache_dir, self.tokenizer) / "manifest.json"
        manifest = read_json(path) if path.is_file() else None
        if not manifest or manifest.get("tokenizer") != tokenizer_identity(self.tokenizer):
            return None
        return int(manifest["splits"]["train"]["tokens"])

    def train_digest(self) -> str:
        """From the manifest's shard checksums: hashing the memmapped shards again would cost a read of them all."""
        manifest = read_json(prepared_dir(self.settings.cache_dir, self.tokenizer) / "manifest.json")
        shards = [shard["sha256"] for shard in manifest["splits"]["train"]["shards"]]
        return hashlib.sha256(json.dumps(shards).encode()).hexdigest()


class StreamingStore(TokenStore):
    """Windows tokenized on the fly; ranks and DataLoader workers read disjoint parts of the stream. Each batch
    carries its worker's stream position, kept here and saved in checkpoints so a resumed run continues there."""

    name = "streaming"

    def __init__(self, source: Any, tokenizer: Tokenizer, settings: DataSettings) -> None:
        super().__init__(source, tokenizer, settings)
        self.positions: dict[int, tuple[int, int, int]] = {}  # this rank's workers -> next window's start
        self._loaded: Optional[dict[str, Any]] = None
        self._identity: Optional[dict[str, Any]] = None

    def identity(self) -> dict[str, Any]:
        """What the stream is (gptlab.data.stream_identity), taken once: the files as this run found them."""
        if self._identity is None:
            s = self.settings
            self._identity = stream_identity(self.source, self.tokenizer, s.block_size, s.val_fraction)
        return self._identity

    @staticmethod
    def _shard(trainer: Any, val: bool) -> tuple[int, int]:
        """(rank, world size) a split is dealt over. Training documents are dealt to ranks; every rank validates the
        same first val_windows windows of all val documents, so val/loss scores the same tokens on any number of
        ranks (the synced sums count each rank's copy, which leaves their ratio as on one rank)."""
        return (0, 1) if val else rank_world(trainer)

    def _stream(self, trainer: Any, val: bool, **kwargs: Any) -> StreamingWindows:
        rank, world = self._shard(trainer, val)
        s = self.settings
        return StreamingWindows(self.source, self.tokenizer, s.block_size, s.val_fraction, val=val, rank=rank,
                                world_size=world, **kwargs)

    def setup(self, trainer: Any) -> None:
        """Fail at setup, not after an empty epoch, when a split cannot fill one window."""
        check_val_fraction(self.settings.val_fraction)
        self.identity()  # the files as they are when the run starts reading them
        for val in (False, True):
            if next(iter(self._stream(trainer, val, max_windows=1)), None) is None:
                fits = fitting_block_size(self._tokens_held(trainer, val))
                raise ConfigError(
                    f"the {'val' if val else 'train'} documents of the streamed source "
                    f"{getattr(self.source, 'name', '')!r} hold fewer than block_size+1="
                    f"{self.settings.block_size + 1} tokens{'' if val else ' for this rank'}; use "
                    + (f"model.block_size={fits} (the largest power of two that fits), " if fits else "")
                    + "more data, or another data.val_fraction."
                )

    def _tokens_held(self, trainer: Any, val: bool) -> int:
        """The tokens of a split too short for one window (so cheap to count): its windows of 2 tokens at stride 1,
        plus one."""
        rank, world = self._shard(trainer, val)
        pairs = StreamingWindows(self.source, self.tokenizer, 1, self.settings.val_fraction, val=val, rank=rank,
                                 world_size=world)
        count = sum(1 for _ in pairs.one_pass())
        return count + 1 if count else 0

    def train_dataloader(self, trainer: Any) -> DataLoader:
        return self._loader(self._stream(trainer, False, start=self._start_positions(trainer)), trainer)

    def val_dataloader(self, trainer: Any) -> DataLoader:
        """The first val_windows windows of the val documents, read afresh each time."""
        return self._loader(self._stream(trainer, True, max_windows=self.settings.val_windows), trainer, num_workers=0)

    def on_before_batch_transfer(self, batch: Any, trainer: Any) -> Any:
        """Streamed batches carry their position as a third element: remember it (training only) and drop it."""
        x, y, position = batch
        if trainer is not None and trainer.training:
            worker, pass_, record, offset = (int(v) for v in position[-1])
            self.positions[worker] = (pass_, record, offset)
        return x, y

    def _layout(self, trainer: Any) -> dict[str, int]:
        return {"world_size": rank_world(trainer)[1], "num_workers": self.settings.num_workers}

    def state_dict(self, trainer: Any) -> dict[str, Any]:
        positions: list[Any] = [self.positions]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            positions = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(positions, self.positions)
        return {"stream": {**self._layout(trainer), "positions": {r: dict(p) for r, p in enumerate(positions)}},
                DATA_IDENTITY: self.identity()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state and "stream" not in state:
            self._refuse(state, "memory or prepared")
        saved = state.get(DATA_IDENTITY)  # None: a checkpoint from before it was saved
        if saved is not None:
            check_same_stream(saved, self.identity())
        self._loaded = state.get("stream")

    def _start_positions(self, trainer: Any) -> dict[int, tuple[int, int, int]]:
        saved = self._loaded
        if saved is None:
            return {}
        layout = self._layout(trainer)
        if {k: saved[k] for k in layout} != layout:
            raise ConfigError(
                f"the checkpoint's stream position was saved with {({k: saved[k] for k in layout})} but this run has "
                f"{layout}; resume with the same trainer.devices/num_nodes and data.num_workers. A streamed dataset "
                "(data.store=streaming) cannot move to another layout: each rank and worker reads its own part of the "
                "stream (datasets' split_dataset_by_node) and packs it into windows itself, so the windows depend on "
                "the layout and the saved positions have no counterpart in another one."
            )
        rank, _ = rank_world(trainer)
        self.positions = {int(w): tuple(p) for w, p in saved["positions"][rank].items()}
        return dict(self.positions)


STORES: dict[str, type[TokenStore]] = {s.name: s for s in (MemoryStore, PreparedStore, StreamingStore)}
