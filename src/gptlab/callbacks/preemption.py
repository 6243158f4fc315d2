"""Save a checkpoint when the cluster preempts the job (SIGTERM), so the requeued job resumes from there."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException


class PreemptionCheckpoint(L.Callback):
    """Lightning turns SIGTERM into a SIGTERMException at the next batch boundary; this saves the checkpoint
    then. Any other exception (a bug, a non-finite loss) saves nothing: the state may be broken, and the
    checkpoints already written stay the last good ones.

    Not Lightning's OnExceptionCheckpoint: its presence makes `fit(ckpt_path=None)` silently resume from the
    newest checkpoint, and gptlab resumes only when asked (`ckpt_path=` or `resume=auto`)."""

    def __init__(self, dirpath: str, filename: str = "preempted") -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException):
            trainer.save_checkpoint(self.path)
