"""The training data position of a map-style DataModule, for exact resume from a checkpoint, also on another
number of ranks.

The position is global: (epoch, windows of that epoch's order trained on). EpochSampler deals an epoch's order
round-robin (rank r of W takes positions r, r+W, ...), so after k micro-batches of b windows on W ranks exactly
the first k*b*W positions are consumed, whatever W. An optimizer step of G = W*b*a windows (a: accumulated
micro-batches) covers positions [s*G, (s+1)*G), and an epoch ends after whole steps, so a resume that keeps G
keeps the content of every step and the epoch boundary however G is split into ranks x micro-batch x accumulation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from gptlab.data.windows import EpochSampler
from gptlab.errors import ConfigError
from gptlab.lightning_internals import batches_this_epoch, epoch_batches_done

log = logging.getLogger(__name__)


def pin_memory(trainer: Optional[L.Trainer]) -> bool:
    """Page-locked batches when training on a GPU: Lightning copies batches with non_blocking=True, which only
    overlaps the copy with compute when the source is pinned."""
    strategy = getattr(trainer, "strategy", None)  # None: no trainer, or a stand-in without one
    return strategy is not None and strategy.root_device.type == "cuda"


@dataclass(frozen=True)
class Position:
    """Where a checkpoint stopped, in terms that do not depend on its layout."""

    epoch: int
    windows: int  # positions of the epoch's global order already trained on
    epoch_windows: int  # the run's windows per epoch (N), fixed when it started
    layout: dict[str, int]  # the layout that trained them


class TrainPosition:
    """Hands out the training sampler and saves/restores where in which epoch training stopped.

    The saved count is the trainer's batches, not how far the sampler was read: the loader reads ahead.
    The sampler's epoch is the one those batches belong to; Lightning's own epoch counters move at different
    points of the loop depending on where the checkpoint was taken. The layout (ranks, micro-batch,
    accumulation) is saved beside the position: a resume may change it as long as the global batch stays."""

    def __init__(self) -> None:
        self.saved: dict[str, Any] = {}  # from a checkpoint
        self.sampler: Optional[EpochSampler] = None
        self.epoch_windows = 0
        self.batch_size = 0  # the micro-batch of the loader handed out

    def train_loader(self, dataset: Dataset, trainer: Optional[L.Trainer], batch_size: int, trimmed_before: bool,
                     **loader_kwargs: Any) -> DataLoader:
        """`dataset` has set_epoch_windows; `trimmed_before`: gptlab before the global position cut this store's
        epoch to a multiple of the ranks (see `restore`)."""
        rank = trainer.global_rank if trainer else 0
        now = layout(trainer, batch_size)
        saved = restore(self.saved, now, len(dataset), trimmed_before)  # type: ignore[arg-type]
        check_step(saved.layout, now, saved.windows)
        if saved.epoch_windows != len(dataset):  # type: ignore[arg-type]
            dataset.set_epoch_windows(saved.epoch_windows)  # type: ignore[attr-defined]
        sampler = EpochSampler(saved.epoch_windows, rank, now["world_size"], step_windows=step_windows(now))
        if sampler.used == 0:
            raise ConfigError(
                f"an epoch of {saved.epoch_windows} training windows holds no optimizer step of {step_windows(now)} "
                f"windows (ranks x data.batch_size x accumulated); raise data.samples_per_epoch (e.g. "
                f"data.samples_per_epoch={step_windows(now)}) or lower data.batch_size / global_batch_tokens."
            )
        epoch, windows = saved.epoch, saved.windows
        if windows >= sampler.used and not _ends_epoch_itself(trainer):  # the next epoch starts afresh
            epoch, windows = epoch + 1, 0
        if saved.layout != now and rank == 0:
            log.info("Continuing on %s (the checkpoint had %s): the data continues at window %d of epoch %d, in the "
                     "same global order.", describe(now), describe(saved.layout), windows, epoch)
        sampler.epoch, sampler.start, sampler.resumed = epoch, windows, bool(self.saved)
        self.batch_size, self.sampler, self.epoch_windows = batch_size, sampler, saved.epoch_windows
        # Its own generator: creating an iterator then draws no number from the global RNG, which dropout
        # uses, so a resumed run's random stream stays the uninterrupted run's.
        loader_kwargs.setdefault("pin_memory", pin_memory(trainer))
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True,
                          generator=torch.Generator().manual_seed(0), **loader_kwargs)

    def windows_done(self, trainer: Optional[L.Trainer]) -> int:
        """Positions of the current epoch trained on by all ranks together."""
        return batches_this_epoch(trainer) * self.batch_size * layout(trainer, self.batch_size)["world_size"]

    def state_dict(self, trainer: Optional[L.Trainer]) -> dict[str, Any]:
        if trainer is None or self.sampler is None:
            return {}
        return {"epoch": self.sampler.epoch, "windows": self.windows_done(trainer),
                "epoch_windows": self.epoch_windows, "layout": layout(trainer, self.batch_size)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.saved = dict(state)


def _ends_epoch_itself(trainer: Optional[L.Trainer]) -> bool:
    """Whether Lightning, resumed from a checkpoint saved after its last batch had completed (in or after a
    validation, e.g. one a preemption cut short), first finishes that epoch and then starts the next one (with a
    set_epoch the sampler follows); from a save at the batch's end it starts the next epoch at once."""
    if trainer is None:
        return False
    processed, completed = epoch_batches_done(trainer)
    return processed > 0 and completed == processed


def layout(trainer: Optional[L.Trainer], batch_size: int) -> dict[str, int]:
    """How the run cuts its global batch: ranks x micro-batch x accumulated micro-batches."""
    world, accumulate = (trainer.world_size, trainer.accumulate_grad_batches) if trainer else (1, 1)
    return {"world_size": world, "batch_size": batch_size, "accumulate": accumulate}


def step_windows(lay: dict[str, int]) -> int:
    """Windows per optimizer step: the global batch."""
    return lay["world_size"] * lay["batch_size"] * lay["accumulate"]


def restore(saved: dict[str, Any], now: dict[str, int], epoch_windows: int, trimmed_before: bool) -> Position:
    """The checkpoint's position in global terms. Checkpoints from before it was global saved `batches` (this
    layout's micro-batches per rank) and their layout (the oldest not even that: taken as this run's); their epoch
    length was cut to a multiple of their ranks where `trimmed_before`, and is kept so their order continues."""
    if not saved:
        return Position(0, 0, epoch_windows, now)
    if "windows" in saved:
        return Position(saved["epoch"], saved["windows"], saved["epoch_windows"], saved["layout"])
    lay = saved.get("layout", now)
    world = lay["world_size"]
    if trimmed_before:
        epoch_windows = max(world, epoch_windows - epoch_windows % world)
    return Position(saved["epoch"], saved["batches"] * lay["batch_size"] * world, epoch_windows, lay)


def describe(lay: dict[str, int]) -> str:
    return (f"{lay['world_size']} rank(s) x data.batch_size={lay['batch_size']} x {lay['accumulate']} "
            f"accumulated = {step_windows(lay)} windows per step")


def same_global_batch(saved: dict[str, int], now: dict[str, int], windows: int) -> str:
    """The settings, typed, that give this run's ranks the checkpoint's global batch and can start where it stopped:
    the largest data.batch_size up to this run's that divides it, with its accumulation (issue 46: with
    data.batch_size=8 against a checkpoint of 4 windows a step, no accumulation reaches 4, and the words alone sent
    the user to a global_batch_tokens that is refused)."""
    target, ranks = step_windows(saved), now["world_size"]
    for size in range(min(now["batch_size"], target), 0, -1):
        if target % (ranks * size) == 0 and windows % (ranks * size) == 0:
            return (f": e.g. data.batch_size={size} trainer.accumulate_grad_batches={target // (ranks * size)} "
                    "(without global_batch_tokens)")
    return (f": on {ranks} rank(s) none does; e.g. trainer.devices={saved['world_size']} "
            f"data.batch_size={saved['batch_size']} trainer.accumulate_grad_batches={saved['accumulate']}")


def check_step(saved: dict[str, int], now: dict[str, int], windows: int) -> None:
    """Refuses a resume whose global batch differs from the checkpoint's: its steps would cover other windows than
    the interrupted run's (and the epoch would end elsewhere). Another split of the same global batch is fine
    unless the checkpoint fell inside a step that the new split cannot start from."""
    if step_windows(saved) != step_windows(now):
        raise ConfigError(
            f"the checkpoint was trained with {describe(saved)}, but this run has {describe(now)}. A resumed run may "
            "change the number of ranks (trainer.devices, trainer.num_nodes), data.batch_size and the accumulation, "
            "but not the global batch: set global_batch_tokens (or trainer.accumulate_grad_batches) so that ranks x "
            f"data.batch_size x accumulated = {step_windows(saved)} windows, as the interrupted run had"
            f"{same_global_batch(saved, now, windows)}."
        )
    per_pass = now["world_size"] * now["batch_size"]
    if windows % per_pass:
        raise ConfigError(
            f"the checkpoint stopped {windows} windows into its epoch, inside an optimizer step, which "
            f"{describe(now)} cannot continue ({per_pass} windows per micro-batch on all ranks); resume with "
            f"the checkpoint's layout, {describe(saved)} (`data.batch_size={saved['batch_size']} "
            f"trainer.accumulate_grad_batches={saved['accumulate']}` on {saved['world_size']} rank(s)), or from a "
            "checkpoint taken at a step's end."
        )
