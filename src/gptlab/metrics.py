"""The scalars a training run logs, named once: the config check refuses a `monitor` (model_checkpoint, early
stopping) that names none of them before training starts, where Lightning would fail only at the first validation,
after the training time is spent. tests/test_no_traceback.py holds the LightningModule and callbacks to this list."""

from __future__ import annotations

LOGGED = (
    "train/loss", "train/lr", "train/grad_norm", "train/z_loss", "train/skipped_steps",
    "val/loss", "val/ppl", "val/bpb", "val-best/loss", "val-best/bpb",
    "x_throughput/tokens_seen", "x_throughput/tokens_per_sec", "x_throughput/mfu", "x_throughput/hfu",
)
PER_SOURCE = ("val/loss/", "val/bpb/", "x_data/tokens/")  # + the name of a mixture's source (data.source.sources)


def is_logged(name: str) -> bool:
    return name in LOGGED or any(name.startswith(prefix) and len(name) > len(prefix) for prefix in PER_SOURCE)
