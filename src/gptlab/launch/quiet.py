"""Known third-party console noise, filtered where it is emitted (not by redirecting output).

Each entry is a message gptlab's users cannot act on: Lightning's advert for its cloud logger, a torch
deprecation inside Lightning's own pytree code (printed once per rank), the note that the configured
limit_val_batches=1.0 means all batches, the device availability lines (the start banner says which devices
run), "Seed set to" (the seed is in config_resolved.yaml), "`Trainer.fit` stopped: `max_steps=N` reached" (the
planned end; the progress bar and the closing line show it; other stop reasons are still printed), and the
DataLoader worker-count advice (data.num_workers is a documented choice: the memory and prepared stores slice
tensors in the training process). The same torch deprecation of the all_gather Lightning's `sync_dist` calls is
dropped too, and a rank > 0 prints no deprecation warning at all: rank 0 prints each once for the job.
"""

from __future__ import annotations

import logging
import warnings

NOISE_PREFIXES = (
    "💡 Tip:",
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "`Trainer(limit_val_batches=1.0)` was configured",
    "Seed set to",
    "`Trainer.fit` stopped: `max_steps=",
)
NOISY_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                 "lightning.fabric.utilities.seed", "lightning.pytorch.utilities.seed")


class DropKnownNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).lstrip().startswith(NOISE_PREFIXES)


def install() -> None:
    """Idempotent: called when gptlab.apps.train is imported, in every rank."""
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropKnownNoise) for f in logger.filters):
            logger.addFilter(DropKnownNoise())
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    warnings.filterwarnings("ignore", message=r"The '(train|val)_dataloader' does not have many workers")
    warnings.filterwarnings("ignore", message=r"torch\.distributed\.nn\.functional\.all_gather is deprecated")
    from gptlab.runs.run_dir import owns_run_dir

    if not owns_run_dir():  # a DDP rank > 0: rank 0 says it once
        warnings.filterwarnings("ignore", message=r"(?s).*deprecat", category=Warning)
