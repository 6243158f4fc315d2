"""How every training checkpoint reaches the disk: whole or not at all, whatever filesystems are involved.

Lightning's TorchCheckpointIO serialises into memory and hands the bytes to fsspec, whose local "transaction"
writes a temp file in $TMPDIR and moves it into the run dir at commit. On a cluster $TMPDIR is usually a node-local
tmpfs and the run dir NFS or Lustre, so that move is a copy which first truncates the old file: a kill or a full
disk during it leaves `last.ckpt` empty or half-written (the run's only checkpoint), and each kill leaks a
checkpoint-sized file in $TMPDIR. Here the checkpoint is serialised straight into a temp file beside its target
(no second copy in memory either), fsynced and renamed over the old one (gptlab.atomic).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from gptlab.atomic import atomic_write
from gptlab.lightning_internals import tensor_leaves


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in a (nested) checkpoint: what its file will roughly take."""
    return sum(t.numel() * t.element_size() for t in tensor_leaves(obj) if isinstance(t, torch.Tensor))


def save_whole(obj: dict[str, Any], path: Path, disk_full_advice: str = "Free some space and run again.") -> None:
    """torch.save `obj` straight into a temp file beside `path`, fsynced and renamed over it (gptlab.atomic)."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            torch.save(obj, f)

    atomic_write(path, write, size_hint=tensor_bytes(obj), disk_full_advice=disk_full_advice)


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO whose save is gptlab.atomic's temp file + fsync + rename in the checkpoint's own dir."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike[str],
                        storage_options: Optional[Any] = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else "<its run dir>"
        save_whole(checkpoint, path, disk_full_advice="The checkpoints saved before are whole: after freeing space, "
                                                      f"continue the run with resume=auto hydra.run.dir={run_dir}")
