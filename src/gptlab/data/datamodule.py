"""GPTDataModule: the one LightningDataModule, for every corpus and every token store.

config -> source (documents) -> split rule (gptlab.data.split: a hash of each document's text picks val) ->
store (`data.store`: memory | prepared | streaming, gptlab.data.stores) -> (x, y) windows of block_size tokens,
and (x, y, document ids) with data.document_masking (gptlab.data.documents).
The store also keeps the training data position that checkpoints save, so a resumed run sees the batches the
uninterrupted run would have seen.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning as L
import torch.distributed as dist
from torch.utils.data import DataLoader

from gptlab.config.schemas import Data
from gptlab.config.validate import check_fields
from gptlab.data.documents import document_ids, masking_eot_id
from gptlab.data.mixture import Mixture
from gptlab.data.mixture_store import MixtureStore
from gptlab.data.stores import STORES, DataSettings, TokenStore
from gptlab.data.tokenizers import Tokenizer
from gptlab.errors import ConfigError, StoppedBySignal
from gptlab.signals import FLAG, agreed_signal


class GPTDataModule(L.LightningDataModule):
    """Random (or epoch-ordered) training windows and a fixed set of validation windows, from `source` read
    through the store named by `store`. `samples_per_epoch` only sets how often Lightning's epoch hooks fire:
    training is bounded by `trainer.max_steps`. Callbacks read `tokenizer`, `batch_size` and `block_size`.
    Each option's default and range are its schema's (gptlab.config.schemas.Data); a default here is for Python
    callers and equals the schema's (tests/test_config_schemas.py), where there is one to copy."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        source: Any,
        store: str,
        block_size: int = 256,
        batch_size: int = 32,
        val_fraction: float = 0.01,
        sampling: str = "random",
        samples_per_epoch: Optional[int] = None,
        cache_dir: Optional[str] = None,
        shard_tokens: int = 100_000_000,
        num_proc: Optional[int] = None,
        verify_sha256: bool = True,
        val_windows: int = 64,
        num_workers: int = 0,
        seed: int = 0,
        document_masking: bool = False,
    ) -> None:
        super().__init__()
        if not hasattr(source, "documents") or not hasattr(source, "describe"):
            raise ConfigError(
                f"data.source is {source!r}, not a corpus: give a node with _target_, e.g. "
                "{_target_: gptlab.data.sources.BuiltinSource, name: pydocs} (see conf/data/); or drop data.source "
                "to keep the data= option's own."
            )
        # The ranges are the Data schema's, checked here too for a module built from Python rather than a config.
        check_fields("data.", dict(store=store, sampling=sampling, batch_size=batch_size, block_size=block_size,
                                   val_fraction=val_fraction, samples_per_epoch=samples_per_epoch,
                                   shard_tokens=shard_tokens, num_proc=num_proc, verify_sha256=verify_sha256,
                                   val_windows=val_windows, num_workers=num_workers,
                                   document_masking=document_masking), Data)
        self.tokenizer, self.source = tokenizer, source
        self.settings = DataSettings(
            block_size=block_size, batch_size=batch_size, val_fraction=val_fraction, num_workers=num_workers,
            seed=seed, sampling=sampling, samples_per_epoch=samples_per_epoch, cache_dir=cache_dir,
            shard_tokens=shard_tokens, num_proc=num_proc, verify_sha256=verify_sha256, val_windows=val_windows,
        )
        self.store: TokenStore = (MixtureStore(source, tokenizer, self.settings, store) if isinstance(source, Mixture)
                                  else STORES[store](source, tokenizer, self.settings))
        eot = masking_eot_id(tokenizer)  # every store separates documents with it
        self.masking_eot = eot if document_masking else None

    @property
    def block_size(self) -> int:
        return self.settings.block_size

    @property
    def batch_size(self) -> int:
        return self.settings.batch_size

    @property
    def val_sources(self) -> Optional[list[str]]:
        """A mixture's source names, one validation DataLoader each in this order; None for a single corpus."""
        return getattr(self.store, "val_sources", None)

    def windows_seen(self) -> Optional[dict[str, int]]:
        """A mixture's training windows read per source so far (all ranks); None for a single corpus."""
        return self.store.windows_seen(self.trainer) if isinstance(self.store, MixtureStore) else None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def prepare_data(self) -> None:
        self.store.prepare()

    def setup(self, stage: Optional[str] = None) -> None:
        """The store's setup (tokenizing, checking shards). A stop signal before training ends every rank together:
        they agree after it (one all-reduce), so a signal to one rank stops all of them, each with the signal's
        exit code and rank 0 with one message, where that rank alone used to stop and the others lose contact."""
        stopped: Optional[StoppedBySignal] = None
        try:
            self.store.setup(self.trainer)
        except StoppedBySignal as err:
            stopped = err
        signum = stopped.signum if stopped else FLAG.signum
        if self.trainer is not None and self.trainer.world_size > 1 and dist.is_initialized():
            signum = agreed_signal(signum, self.trainer.strategy.root_device)
        if signum:
            FLAG.consume()
            raise stopped or StoppedBySignal(signum, "preparing the data (the signal reached another rank), before "
                                                     "training started")

    def train_dataloader(self) -> DataLoader:
        return self.store.train_dataloader(self.trainer)

    def val_dataloader(self) -> DataLoader:
        return self.store.val_dataloader(self.trainer)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        batch = self.store.on_before_batch_transfer(batch, self.trainer)
        if self.masking_eot is None:
            return batch
        x, y = batch
        return x, y, document_ids(x, self.masking_eot)

    def state_dict(self) -> dict[str, Any]:
        """The training data position (see gptlab.data.stores), for exact resume."""
        return self.store.state_dict(self.trainer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.store.load_state_dict(state_dict)
