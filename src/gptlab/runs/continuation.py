"""Lightning's warnings that a continued run is expected to raise, silenced only while gptlab continues a run.

- "The dirpath has changed from <old> to <new>, therefore `best_model_score` ... won't be reloaded": raised when a
  checkpoint is continued in another run dir (ckpt_path=...). gptlab carries the best val/loss over itself
  (run.previous_best), so nothing the user relies on is lost.
- "Checkpoint directory <dir> exists and is not empty": raised when a run continues in its own dir (resume=auto, a
  relaunched sweep job). It is silenced only when the checkpoint continued from lies in that very dir: a new run
  started into a dir holding other checkpoints still hears it.
Every other warning passes, also during the same fit.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Iterable, Iterator, Optional

DIRPATH_CHANGED = r"The dirpath has changed from .* won't be reloaded"
DIR_NOT_EMPTY = r"Checkpoint directory .* exists and is not empty"


@contextlib.contextmanager
def expected_warnings_silenced(ckpt_path: Optional[str], checkpoint_dirs: Iterable[Path]) -> Iterator[None]:
    """Around trainer.fit: silences the warnings above that continuing from `ckpt_path` makes expected."""
    with warnings.catch_warnings():
        if ckpt_path is not None:
            warnings.filterwarnings("ignore", message=DIRPATH_CHANGED)
            if Path(ckpt_path).resolve().parent in {Path(d).resolve() for d in checkpoint_dirs}:
                warnings.filterwarnings("ignore", message=DIR_NOT_EMPTY)
        yield
