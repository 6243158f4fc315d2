"""The training data position of a map-style DataModule, for exact resume from a checkpoint."""

from __future__ import annotations

from typing import Any, Optional

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from gptlab.data.windows import EpochSampler
from gptlab.errors import ConfigError


def pin_memory(trainer: Optional[L.Trainer]) -> bool:
    """Page-locked batches when training on a GPU: Lightning copies batches with non_blocking=True, which only
    overlaps the copy with compute when the source is pinned."""
    strategy = getattr(trainer, "strategy", None)  # None: no trainer, or a stand-in without one
    return strategy is not None and strategy.root_device.type == "cuda"


class TrainPosition:
    """Hands out the training sampler and saves/restores where in which epoch training stopped.

    The saved count is the trainer's batches, not how far the sampler was read: the loader reads ahead.
    The sampler's epoch is the one those batches belong to; Lightning's own epoch counters move at different
    points of the loop depending on where the checkpoint was taken.
    The batch layout (ranks, micro-batch, accumulation) is saved too: `batches` counts this layout's micro-batches,
    so a resume with another layout is refused rather than continued at the wrong sample (`check_layout`)."""

    def __init__(self) -> None:
        self.saved: dict[str, int] = {}  # from a checkpoint
        self.sampler: Optional[EpochSampler] = None
        self.batch_size = 0  # the micro-batch of the loader handed out

    def train_loader(self, dataset: Dataset, trainer: Optional[L.Trainer], batch_size: int,
                     **loader_kwargs: Any) -> DataLoader:
        rank, world = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        check_layout(self.saved.get("layout"), layout(trainer, batch_size))
        sampler = EpochSampler(len(dataset), rank, world)
        epoch, batches = self.saved.get("epoch", 0), self.saved.get("batches", 0)
        if batches >= len(sampler) // batch_size:  # stopped at an epoch's end: the next one starts afresh
            epoch, batches = epoch + 1, 0
        sampler.epoch, sampler.start = epoch, batches * batch_size
        self.batch_size = batch_size
        self.sampler = sampler
        # Its own generator: creating an iterator then draws no number from the global RNG, which dropout
        # uses, so a resumed run's random stream stays the uninterrupted run's.
        loader_kwargs.setdefault("pin_memory", pin_memory(trainer))
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True,
                          generator=torch.Generator().manual_seed(0), **loader_kwargs)

    def state_dict(self, trainer: Optional[L.Trainer]) -> dict[str, int]:
        if trainer is None or self.sampler is None:
            return {}
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        return {"epoch": self.sampler.epoch, "batches": progress.processed,
                "layout": layout(trainer, self.batch_size)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.saved = dict(state)


def layout(trainer: Optional[L.Trainer], batch_size: int) -> dict[str, int]:
    """How the run cuts its global batch: ranks x micro-batch x accumulated micro-batches."""
    world, accumulate = (trainer.world_size, trainer.accumulate_grad_batches) if trainer else (1, 1)
    return {"world_size": world, "batch_size": batch_size, "accumulate": accumulate}


def check_layout(saved: Optional[dict[str, int]], now: dict[str, int]) -> None:
    """Refuses a resume whose batch layout differs from the checkpoint's (checkpoints from before the layout was
    saved are taken as they are). The saved position counts micro-batches per rank of that layout, and gptlab does
    not yet move it to another number of ranks or another global batch."""
    if saved is None or saved == now:
        return

    def describe(lay: dict[str, int]) -> str:
        return (f"{lay['world_size']} rank(s) x data.batch_size={lay['batch_size']} x {lay['accumulate']} "
                f"accumulated = {lay['world_size'] * lay['batch_size'] * lay['accumulate']} windows per step")

    raise ConfigError(
        f"the checkpoint was trained with {describe(saved)}, but this run has {describe(now)}. gptlab resumes the "
        "exact data order only with the same layout: set trainer.devices/trainer.num_nodes, data.batch_size and "
        "global_batch_tokens as the interrupted run had them (resuming on another number of ranks or with "
        "another global batch size is not supported yet)."
    )
