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

from gptlab.atomic import link_into_place

log = logging.getLogger(__name__)


class ModelCheckpoint(LightningModelCheckpoint):
    """ModelCheckpoint whose last.ckpt shares the files of the checkpoint it saved at the same step."""

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: dict[str, Any]) -> None:
        saved = self._last_checkpoint_saved
        same_step = bool(saved) and self._last_global_step_saved == trainer.global_step
        if not self.save_last or not same_step or self.save_last == "link":
            return super()._save_last_checkpoint(trainer, monitor_candidates)
        filepath = self.format_checkpoint_name(monitor_candidates, self.CHECKPOINT_NAME_LAST)
        if Path(filepath).absolute() == Path(saved).absolute() or (
                self._enable_version_counter and filepath != self.last_model_path):  # Lightning picks last-vN
            return super()._save_last_checkpoint(trainer, monitor_candidates)
        linked = True
        if trainer.is_global_zero:
            linked = link_into_place(Path(saved), Path(filepath))
        linked = trainer.strategy.broadcast(linked)
        if not linked:
            if trainer.is_global_zero:
                log.warning("the filesystem of %s has no hard links: last.ckpt is written as a second copy",
                            filepath)
            return super()._save_last_checkpoint(trainer, monitor_candidates)
        self.last_model_path = filepath  # what Lightning's save would have recorded
        self._last_checkpoint_saved = filepath

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Lightning's last-chance save of last.ckpt by a callback that saved nothing yet (the periodic one in a run
        shorter than its interval), skipped where another callback already saved this step as that last.ckpt."""
        if self.save_last and not self._last_checkpoint_saved:
            path = self.format_checkpoint_name(self._monitor_candidates(trainer), self.CHECKPOINT_NAME_LAST)
            if any(cb is not self and cb.last_model_path == path and cb._last_global_step_saved == trainer.global_step
                   for cb in trainer.checkpoint_callbacks if isinstance(cb, LightningModelCheckpoint)):
                return
        super().on_train_end(trainer, pl_module)
