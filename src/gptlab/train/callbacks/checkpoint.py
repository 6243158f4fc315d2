"""Lightning's ModelCheckpoint, except that last.ckpt costs no disk when it is the step just saved.

At a validation that improves val/loss, Lightning writes the best checkpoint and then writes the same step again as
last.ckpt: two full copies (2 x 17 GB for a 1.3B model with Adam states). Here last.ckpt becomes a hard link of the
file (or sharded folder) saved a moment before at the same step: one copy on disk, two names, each a whole
checkpoint by itself. Lightning's own `save_last="link"` makes a symbolic link instead, which dangles once the best
moves on and which it also points at an older best when a later save was made by another callback (the periodic
one refreshes the same last.ckpt). On a filesystem without hard links the copy is written as before.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint as LightningModelCheckpoint

from gptlab import lightning_internals as internals
from gptlab.atomic import link_into_place

log = logging.getLogger(__name__)


@internals.routes_save_last
class ModelCheckpoint(LightningModelCheckpoint):
    """ModelCheckpoint whose last.ckpt shares the files of the checkpoint it saved at the same step."""

    def write_last(self, trainer: L.Trainer, monitor_candidates: dict[str, Any]) -> None:
        """Where Lightning writes last.ckpt: a hard link when this callback saved the same step a moment before."""
        saved = internals.last_checkpoint_saved(self)
        same_step = bool(saved) and internals.last_global_step_saved(self) == trainer.global_step
        if not self.save_last or not same_step or self.save_last == "link":
            return internals.lightning_save_last(self, trainer, monitor_candidates)
        filepath = self.format_checkpoint_name(monitor_candidates, self.CHECKPOINT_NAME_LAST)
        if Path(filepath).absolute() == Path(saved).absolute() or (
                internals.version_counter_enabled(self) and filepath != self.last_model_path):  # Lightning: last-vN
            return internals.lightning_save_last(self, trainer, monitor_candidates)
        linked = True
        if trainer.is_global_zero:
            linked = link_into_place(Path(saved), Path(filepath))
        linked = trainer.strategy.broadcast(linked)
        if not linked:
            if trainer.is_global_zero:
                log.warning("the filesystem of %s has no hard links: last.ckpt is written as a second copy",
                            filepath)
            return internals.lightning_save_last(self, trainer, monitor_candidates)
        self.last_model_path = filepath  # what Lightning's save would have recorded
        internals.mark_last_checkpoint_saved(self, filepath)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Lightning's last-chance save of last.ckpt by a callback that saved nothing yet (the periodic one in a run
        shorter than its interval), skipped where another callback already saved this step as that last.ckpt."""
        if self.save_last and not internals.last_checkpoint_saved(self):
            path = self.format_checkpoint_name(internals.monitor_candidates(self, trainer), self.CHECKPOINT_NAME_LAST)
            if any(cb is not self and cb.last_model_path == path
                   and internals.last_global_step_saved(cb) == trainer.global_step
                   for cb in trainer.checkpoint_callbacks if isinstance(cb, LightningModelCheckpoint)):
                return
        super().on_train_end(trainer, pl_module)
