"""Per-source training tokens of a weighted mixture (data.source: gptlab.data.mixture.Mixture), in TensorBoard.

`x_data/tokens/<source>` (`x_`: after train/ and val/ in TensorBoard, docs/run-outputs.md) counts the target tokens
of every window read from the source so far, all ranks together; it comes from the mixture's position
(gptlab.data.mixture_store.windows_seen), the same on every rank, so it needs no communication. With
data.sampling=epoch a source that has read all its windows starts its next pass in a new order; the run says so
(once per pass) instead of repeating data silently. A single-corpus run logs nothing here.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L

from gptlab.lightning_internals import logs_this_step
from gptlab.train.module import GPTLitModule

log = logging.getLogger(__name__)


class MixtureTokens(L.Callback):
    def __init__(self) -> None:
        self._passes: dict[str, int] = {}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: GPTLitModule, *args: Any) -> None:  # type: ignore[override]
        datamodule = getattr(trainer, "datamodule", None)
        seen = datamodule.windows_seen() if hasattr(datamodule, "windows_seen") else None
        if not seen:
            return
        if trainer.is_global_zero:
            self._announce_passes(seen, getattr(datamodule.store, "train_windows", {}))
        if logs_this_step(trainer):
            for name, windows in seen.items():
                pl_module.log_step_scalar(f"x_data/tokens/{name}", float(windows * datamodule.block_size))

    def _announce_passes(self, seen: dict[str, int], per_pass: dict[str, int]) -> None:
        for name, windows in per_pass.items():
            passes = seen[name] // windows
            if passes > self._passes.setdefault(name, passes):
                log.info("data: source %r has read all %d of its windows %d time(s); pass %d reads them in a new "
                         "order (data.sampling=epoch).", name, windows, passes, passes + 1)
            self._passes[name] = passes
