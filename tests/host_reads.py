"""Where a training run reads device tensors to the host, by optimizer step and micro-batch.

On a GPU, `.item()`, `float()`, `bool()`, `.tolist()`, `.cpu()`, `nonzero`, printing a CUDA tensor and
`torch.tensor(value, device=...)` make the CPU wait until the GPU has run everything queued before it; while the CPU
then runs Lightning's hooks, fetches the next batch and launches its kernels, the GPU idles. Once per logging step that
costs nothing; after every micro-batch it costs a few % of a run (Lightning reads every prog_bar metric after each
batch, for one). The same calls are seen on a CPU run through a TorchFunctionMode, so the tests that use this run
everywhere.
"""

from __future__ import annotations

import contextlib
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import lightning as L
from torch.overrides import TorchFunctionMode

# Tensor methods that copy a value to the host (on a CUDA tensor: a wait for the device).
HOST_READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy", "nonzero", "__repr__",
              "__format__"}
# Tensors made from Python values on a given device (Lightning's self.log of a float makes one on the module's
# device): on a GPU a blocking copy from pageable memory, which waits for the device as well.
HOST_COPIES = {"tensor", "as_tensor", "scalar_tensor"}


@dataclass
class Read:
    phase: str  # "train": a training micro-batch (its hooks, logging and loop code included); "validation": a batch
    step: int  # the optimizer step the micro-batch belongs to (global_step when it started), or validated after
    micro_batch: int  # its place within that step from 0, or the validation batch's index
    call: str
    where: str  # the first frames outside torch, innermost first


@dataclass
class HostReads(TorchFunctionMode):
    """Records every host read made while a training micro-batch or a validation batch runs, not those of setup,
    of a validation's end (its one read of the sums) or of the end of training."""

    reads: list[Read] = field(default_factory=list)
    phase: Optional[str] = None  # what runs now: "train", "validation" or None (not recorded)
    step: int = -1
    micro_batch: int = -1
    last_micro_batch: dict[int, int] = field(default_factory=dict)  # step -> index of the micro-batch that ended it

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if self.phase and (name in HOST_READS or name in HOST_COPIES and (kwargs or {}).get("device") is not None):
            frames = [f for f in traceback.extract_stack()[:-1] if "site-packages/torch/" not in f.filename]
            self.record(func.__name__, " <- ".join(f"{'/'.join(Path(f.filename).parts[-2:])}:{f.lineno}"
                                                   for f in frames[-4:][::-1]))
        return func(*args, **(kwargs or {}))

    def record(self, call: str, where: str) -> None:
        assert self.phase is not None
        self.reads.append(Read(self.phase, self.step, self.micro_batch, call, where))

    def training(self) -> list[Read]:
        return [r for r in self.reads if r.phase == "train"]

    def callback(self) -> L.Callback:
        """Put first among the run's callbacks: it marks each batch before any other hook of it runs."""
        return _Marks(self)


class _Marks(L.Callback):
    def __init__(self, reads: HostReads) -> None:
        self.reads = reads
        self._batch = -1  # the current training micro-batch's index in its step, kept across a validation

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        r = self.reads
        self._batch = self._batch + 1 if trainer.global_step == r.step else 0
        r.step, r.micro_batch, r.phase = trainer.global_step, self._batch, "train"

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step != self.reads.step:
            self.reads.last_micro_batch[self.reads.step] = self.reads.micro_batch

    def on_validation_start(self, *args: Any) -> None:
        self.reads.phase = None

    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int,
                                  *args: Any) -> None:
        if not trainer.sanity_checking:
            self.reads.phase, self.reads.micro_batch = "validation", batch_idx

    def on_validation_epoch_end(self, *args: Any) -> None:
        self.reads.phase = None

    def on_validation_end(self, trainer: L.Trainer, *args: Any) -> None:
        # What runs after a validation (its checkpoints) belongs to the step's last micro-batch.
        if not trainer.sanity_checking and self.reads.step >= 0:
            self.reads.phase, self.reads.micro_batch = "train", self._batch

    def on_train_end(self, *args: Any) -> None:
        self.reads.phase = None


@contextlib.contextmanager
def cuda_syncs(reads: HostReads) -> Iterator[None]:
    """On a GPU, adds what torch itself reports as synchronizing (torch.cuda.set_sync_debug_mode) to `reads`: the
    syncs a TorchFunctionMode cannot see, such as a blocking copy inside a library call."""
    import torch

    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        show = warnings.showwarning

        def record(message: Any, category: Any, filename: str, lineno: int, *args: Any, **kwargs: Any) -> None:
            if "synchroniz" in str(message) and reads.phase:
                reads.record("cuda sync", f"{'/'.join(Path(filename).parts[-2:])}:{lineno}")
            elif "synchroniz" not in str(message):
                show(message, category, filename, lineno, *args, **kwargs)

        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(previous)
