"""Preemption (SIGTERM, or SIGUSR1 for SLURM requeue) that ends every rank promptly with a whole checkpoint.

Lightning's own handling hangs DDP jobs: its SIGTERM handler broadcasts from inside the signal handler (a
collective only the signalled rank enters) and each rank then raises at its own next boundary while the others
wait in a gradient all-reduce or ModelCheckpoint's barrier. Here a handler only records the signal; at each
optimizer-step boundary every rank contributes its flag to one small all-reduce (started asynchronously and read
one step later, so a GPU's queue is never drained for it), so all ranks learn of a signal to any one of them at
the same step, save `last.ckpt` together (replacing the last periodic save, so a preemption adds no copy on disk) and
stop with PreemptedError: exit code 128 + the signal number.

Validation (the periodic one, the final one, a sanity check) can last far longer than a scheduler's grace time, so
the flags are also combined as each validation batch starts (under DDP only where every rank validates the same
number of batches, i.e. map-style val sets; a streamed one is acted on at the next step boundary, as before). A signal
there stops the validation at once: the training state is still that of the last optimizer step, so `last.ckpt` is
saved as if that validation had not begun (its batch counters and the RNGs as they were when it started), and a
resume runs it again in full (Lightning's restart "mid-evaluation"). A signal in the step that a validation follows
is saved at that validation's first batch, for the same reason. In the sanity check no step has been taken since the
run started or resumed: nothing is saved, and the run stops as it does in data preparation (StoppedBySignal).

Work that rank 0 alone does at a step boundary after this callback's check (callbacks.zero_shot) stops between its
batches on a signal and then calls `stop_at_this_boundary` on every rank: the other ranks are waiting for rank 0
there anyway, so one blocking all-reduce costs nothing, and every rank saves and stops at that same step.
"""

from __future__ import annotations

import copy
import functools
import os
import signal
import time
from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset

from gptlab.checkpoint.rng import rng_states, set_rng_states
from gptlab.errors import PreemptedError, StoppedBySignal
from gptlab.lightning_internals import checkpoint_val_batch_counters, val_batch_progress, validation_follows_step
from gptlab.signals import FLAG, agreed_signal, requeue_slurm_job


class PreemptionCheckpoint(L.Callback):
    """Saves `<dirpath>/<filename>.ckpt` at the first optimizer-step boundary at which any rank has seen a
    preemption signal, then raises PreemptedError on every rank. Any other exception saves nothing: the state may
    be broken, and the checkpoints already written stay the last good ones."""

    keeps_one_named_file = True  # the disk planner (preflight/checkpoint_plan.py) counts <dirpath>/<filename>.ckpt once

    def __init__(self, dirpath: str, filename: str = "last", grace_seconds: Optional[float] = 30) -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"
        self.grace_seconds = grace_seconds
        self._timed = [0]  # steps ended in this fit (_step_ended)
        self.saved_step: Optional[int] = None  # the step of the newest checkpoint this run saved or resumed from
        self._pending: Optional[tuple[torch.Tensor, Any]] = None  # an all-reduce in flight
        self._before_validation: Optional[tuple[dict[str, Any], dict[str, Any]]] = None  # counters, RNGs

    def _agreed_signal(self, trainer: L.Trainer) -> int:
        """The signal any rank had seen one step ago (0: none), the same on every rank."""
        if trainer.world_size == 1 or not dist.is_initialized():
            return FLAG.signum
        agreed = 0
        if self._pending is not None:
            flags, work = self._pending
            work.wait()
            agreed = int(flags.item())  # the step before's: complete by now, no wait on this step's work
        flags = torch.tensor([FLAG.signum], dtype=torch.int32, device=trainer.strategy.root_device)
        self._pending = (flags, dist.all_reduce(flags, op=dist.ReduceOp.MAX, async_op=True))
        return agreed

    def stop_at_this_boundary(self, trainer: L.Trainer) -> None:
        """Called by every rank at the same optimizer-step boundary, after this callback's own check: saves and stops
        there if any rank has seen a signal (by the next validation's first batch where one follows this step)."""
        signum = self.agree_now(trainer)
        if signum and not _validation_follows(trainer):
            self._save_and_stop(trainer, signum)

    def agree_now(self, trainer: L.Trainer) -> int:
        """The signal any rank has seen (0: none), by blocking all-reduces that every rank must join; afterwards
        each rank's flag holds it, so later checks (a following validation's first batches) agree on it too."""
        signum = FLAG.signum
        if trainer.world_size > 1 and dist.is_initialized():
            # First wait for every rank (rank 0 may still be scoring): a signal to a rank that waits here is
            # handled as this returns, so the flags all-reduced next include it.
            dist.all_reduce(torch.zeros(1, dtype=torch.int32, device=trainer.strategy.root_device))
            signum = agreed_signal(FLAG.signum, trainer.strategy.root_device)
            if signum:  # never cleared here: a signal that came during the all-reduce is for the next check
                FLAG.signum = signum
        return signum

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.world_size > 1:  # one rank leaving alone would leave the others in a collective: not yet
            return
        FLAG.grace_s, FLAG.overdue = self.grace_seconds, functools.partial(_stop_overdue, self)
        FLAG.step_seconds, self._timed[0] = None, 0
        FLAG.fits += 1  # a grace deadline left by an earlier fit of this process is not this fit's

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        FLAG.grace_s = FLAG.busy_since = FLAG.overdue = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if not batch_idx % trainer.accumulate_grad_batches:
            FLAG.busy_since = time.monotonic()  # an optimizer step begins: the grace deadline applies to it

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # mid-accumulation: not a point a checkpoint can resume from exactly
        _step_ended(self._timed)
        signum = self._agreed_signal(trainer)
        if signum and not _validation_follows(trainer):  # else its first batch saves, and a resume runs it
            self._save_and_stop(trainer, signum)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:  # what a validation cut short must leave as it found
            self._before_validation = (copy.deepcopy(val_batch_progress(trainer).state_dict()), rng_states())

    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                                  batch_idx: int, dataloader_idx: int = 0) -> None:
        if not _same_val_batches(trainer):
            return  # ranks may validate unequal numbers of batches: the next step boundary agrees instead
        signum = self._agreed_signal(trainer)
        if not signum:
            FLAG.busy_since = time.monotonic()  # a validation batch can outlast the grace too
            return
        if trainer.sanity_checking:  # before the first step of this process: the state on disk is this one
            raise StoppedBySignal(FLAG.consume(), "running the sanity-check validation (nothing to save)")
        assert self._before_validation is not None
        progress, rngs = self._before_validation
        val_batch_progress(trainer).load_state_dict(_one_batch_started(progress))  # mid-evaluation, nothing done
        set_rng_states(rngs)  # the run stops here: its RNGs may go back to where the validation found them
        self._save_and_stop(trainer, signum)

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any,
                                **kwargs: Any) -> None:
        FLAG.busy_since = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._before_validation = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self.saved_step = trainer.global_step

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self.saved_step = checkpoint.get("global_step")
        settle_rerun_counters(checkpoint)  # before Lightning restores its loops from it

    def _save_and_stop(self, trainer: L.Trainer, signum: int) -> None:
        trainer.save_checkpoint(self.path, weights_only=False)  # all of it; collective: rank 0 writes
        FLAG.consume()
        if signum == signal.SIGUSR1 and trainer.is_global_zero:
            requeue_slurm_job()
        raise PreemptedError(signum, trainer.global_step, self.path)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._pending = None
        FLAG.grace_s = FLAG.busy_since = FLAG.overdue = None


def _step_ended(timed: list[int]) -> None:
    """Between steps now. The step time measured is the latest step's, from the second on (the first compiles and
    warms up); `timed` counts the steps ended in this fit."""
    began, FLAG.busy_since = FLAG.busy_since, None
    timed[0] += 1
    if began is not None and timed[0] > 1:
        FLAG.step_seconds = time.monotonic() - began


def _stop_overdue(callback: PreemptionCheckpoint, signum: int, why: str) -> None:
    """The step in progress cannot end within the scheduler's grace (gptlab.signals): one line with the last
    checkpoint on disk and how to go on, then the exit a preemption gives, before the scheduler's SIGKILL."""
    from gptlab.checkpoint.reader import checkpoints_newest_first
    from gptlab.launch.continuing import continue_words
    from gptlab.launch.death_watch import bye

    run_dir = callback.path.parent.parent
    try:
        saved = checkpoints_newest_first(run_dir) if run_dir.is_dir() else []
        step = "" if callback.saved_step is None else f" (step {callback.saved_step})"
        last = f"The last checkpoint on disk is {saved[0]}{step}." if saved else "No checkpoint was written yet."
        then = continue_words(run_dir, bool(saved))
    except Exception as err:  # noqa: BLE001  (the line and the exit matter more than the words)
        last, then = f"The checkpoints are in {callback.path.parent} ({err}).", ""
    line = (f"gptlab: preempted ({signal.Signals(signum).name}) without a save: {why}, beyond "
            f"callbacks.preemption_checkpoint.grace_seconds={callback.grace_seconds:g} (the scheduler's grace before "
            f"its SIGKILL), so the run stops now. {last} {then}\n")
    bye()  # the death watcher stays quiet: this process said why it ends
    os.write(2, line.encode(errors="replace"))
    os._exit(128 + signum)


def _validation_follows(trainer: L.Trainer) -> bool:
    """Whether Lightning validates right after this optimizer step (at its interval, or the final validation)."""
    return trainer.limit_val_batches != 0 and _same_val_batches(trainer) and validation_follows_step(trainer)


def _same_val_batches(trainer: L.Trainer) -> bool:
    """Whether every rank validates the same number of batches, so that each may join one all-reduce per batch:
    one process, or map-style val sets (gptlab's stores give each rank the same windows, or Lightning a padded
    share). A streamed (iterable) val set may hold fewer windows on one rank than on another."""
    if trainer.world_size == 1:
        return True
    loaders = trainer.val_dataloaders
    if loaders is None:
        return False
    loaders = loaders if isinstance(loaders, (list, tuple)) else [loaders]
    return not any(isinstance(getattr(loader, "dataset", None), IterableDataset) for loader in loaders)


def validation_cut(checkpoint: dict[str, Any]) -> bool:
    """Whether `checkpoint` was saved by a preemption during a validation (see _one_batch_started): both scopes
    one batch begun and none done (a validation run again on resume leaves only "total" so: settle_rerun_counters)."""
    counters = checkpoint_val_batch_counters(checkpoint)
    return all(_one_begun(counters.get(scope, {})) for scope in ("total", "current"))


def _one_begun(counts: dict[str, Any]) -> bool:
    return bool(counts) and counts["ready"] == counts["started"] == counts["processed"] + 1


def settle_rerun_counters(checkpoint: dict[str, Any]) -> None:
    """A validation cut by a preemption and run again on resume leaves the "total" validation counters one batch
    ahead for the rest of the run (Lightning's restart resets only "current"), and every later checkpoint reads as
    cut again: its resume would validate that step once more, logging a second val/loss at it. Such a checkpoint's
    "total" is set back to the batches completed; one saved during a validation (validation_cut) is left as is."""
    total = checkpoint_val_batch_counters(checkpoint).get("total")
    if total and not validation_cut(checkpoint) and _one_begun(total):
        total["ready"] = total["started"] = total["completed"]


def _one_batch_started(progress: dict[str, Any]) -> dict[str, Any]:
    """Validation batch counters as Lightning reads "restarted mid-evaluation" (one batch started, none processed),
    on top of those from before the validation began: a resume runs that validation again from its first batch."""
    progress = copy.deepcopy(progress)
    for scope in ("total", "current"):
        progress[scope]["ready"] = progress[scope]["completed"] + 1
        progress[scope]["started"] = progress[scope]["completed"] + 1
        progress[scope]["processed"] = progress[scope]["completed"]
    return progress
