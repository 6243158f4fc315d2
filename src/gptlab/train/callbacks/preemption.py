"""Preemption (SIGTERM, or SIGUSR1 for SLURM requeue) that ends every rank promptly with a whole checkpoint.

Lightning's own handling hangs DDP jobs: its SIGTERM handler broadcasts from inside the signal handler (a
collective only the signalled rank enters) and each rank then raises at its own next boundary while the others
wait in a gradient all-reduce or ModelCheckpoint's barrier. Here a handler only records the signal; at each
optimizer-step boundary every rank contributes its flag to one small all-reduce (started asynchronously and read
one step later, so a GPU's queue is never drained for it), so all ranks learn of a signal to any one of them at
the same step, save `last.ckpt` together (replacing the last periodic save, so a preemption adds no copy on disk) and
stop with PreemptedError: exit code 128 + the signal number.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
import torch.distributed as dist

from gptlab.errors import PreemptedError
from gptlab.signals import FLAG


class PreemptionCheckpoint(L.Callback):
    """Saves `<dirpath>/<filename>.ckpt` at the first optimizer-step boundary at which any rank has seen a
    preemption signal, then raises PreemptedError on every rank. Any other exception saves nothing: the state may
    be broken, and the checkpoints already written stay the last good ones."""

    keeps_one_named_file = True  # the disk planner (preflight/checkpoint_plan.py) counts <dirpath>/<filename>.ckpt once

    def __init__(self, dirpath: str, filename: str = "last") -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"
        self._pending: Optional[tuple[torch.Tensor, Any]] = None  # an all-reduce in flight

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

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # mid-accumulation: not a point a checkpoint can resume from exactly
        signum = self._agreed_signal(trainer)
        if not signum:
            return
        trainer.save_checkpoint(self.path, weights_only=False)  # all of it; collective: rank 0 writes
        FLAG.consume()
        if signum == signal.SIGUSR1 and trainer.is_global_zero:
            requeue_slurm_job()
        raise PreemptedError(signum, trainer.global_step, self.path)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._pending = None


def requeue_slurm_job() -> None:
    """Under SLURM, put the job back in the queue (what `sbatch --requeue --signal=SIGUSR1@90` expects)."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        array = os.environ.get("SLURM_ARRAY_JOB_ID")
        job = f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array else job
        subprocess.run(["scontrol", "requeue", job], check=False)
