"""Save a checkpoint when the cluster preempts the job (SIGTERM), so the requeued job resumes from there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException


class PreemptionCheckpoint(L.Callback):
    """Lightning's SIGTERM handler only sets `trainer.received_sigterm`, and the loop raises SIGTERMException
    at the next boundary. This saves at the end of the training batch that saw the flag, the point Lightning
    restores exactly (a save made later, after an epoch's end, resumes with a truncated next epoch); if the
    signal came during validation, it saves when the exception passes instead.

    Any other exception (a bug, a non-finite loss) saves nothing: the state may be broken, and the checkpoints
    already written stay the last good ones. Not Lightning's OnExceptionCheckpoint: its presence makes
    `fit(ckpt_path=None)` silently resume, and gptlab resumes only when asked (`ckpt_path=`, `resume=auto`)."""

    def __init__(self, dirpath: str, filename: str = "preempted") -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"
        self._saved = False

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.received_sigterm and not self._saved:
            trainer.save_checkpoint(self.path)
            self._saved = True

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and not self._saved:
            trainer.save_checkpoint(self.path)
            self._saved = True
