"""Tokens seen, tokens/s, MFU and HFU, on top of Lightning Fabric's windowed `Throughput`, against gptlab's dense peak
table (execution/peak_flops.py; Lightning's has no entry for the name an H200 reports, and lists sparse rates).

MFU counts the model's FLOPs (6N + attention: what the run computes for its result); HFU, beside it, the FLOPs the
device really ran, with what activation checkpointing recomputes (execution/checkpointing.py: full = one more forward
of the blocks; selective = no matmul). They differ only under full checkpointing.

Lightning's own ThroughputMonitor logs samples and batches under its own names and only to the logger; this
callback logs the token-level numbers a language-model run is judged by. None is logged with prog_bar=True: Lightning
reads every progress-bar metric to the host after every micro-batch (a GPU sync each time); gptlab's progress bar
(callbacks/progress.py) counts tokens/s itself.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import lightning as L
from lightning.fabric.utilities.throughput import Throughput

from gptlab.execution.checkpointing import hardware_flops_per_token
from gptlab.execution.fused import clock
from gptlab.execution.peak_flops import device_peak
from gptlab.lightning_internals import logs_this_step, micro_batches_trained
from gptlab.model import training_flops_per_token

log = logging.getLogger(__name__)


class TokenThroughput(L.Callback):
    """Logs `x_throughput/tokens_seen` every step, and `x_throughput/tokens_per_sec` (all devices),
    `x_throughput/mfu` and `x_throughput/hfu` (per device, only where the GPU's peak FLOPs is known) averaged over
    the last `window_size` batches.
    `x_`: after train/ and val/ in TensorBoard, which opens the first two groups (docs/run-outputs.md)."""

    def __init__(self, window_size: int = 20, peak_flops: Optional[float] = None) -> None:
        self.window_size = window_size
        self.peak_flops = peak_flops  # FLOP/s per device; None = gptlab's table for the GPU (execution/peak_flops.py)
        self._throughput: Optional[Throughput] = None
        self._flops_per_token = 0
        self._hardware_ratio = 1.0  # hardware FLOPs / model FLOPs
        self._start = 0.0
        self._batches = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        cfg = pl_module.model.config
        mode = getattr(pl_module, "checkpointing", "none")  # runtime.activation_checkpointing as parallelize applied it
        self._flops_per_token = training_flops_per_token(cfg)["total"]  # 6N + attention, from the config
        hardware = hardware_flops_per_token(cfg, mode)
        self._hardware_ratio = hardware / self._flops_per_token
        peak, source = device_peak(trainer.strategy.root_device, trainer.precision, self.peak_flops)
        if trainer.is_global_zero and (peak or trainer.strategy.root_device.type == "cuda"):
            log.info("MFU against %s" % (f"{peak / 1e12:,.1f} TFLOP/s per device: {source}" if peak else
                                         f"nothing: {source}"))
        self._throughput = Throughput(available_flops=peak, world_size=trainer.world_size, window_size=self.window_size)
        self._start, self._batches = clock(), 0

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        x = batch[0]
        tokens_per_batch = getattr(pl_module, "trained_tokens", x.numel())  # per device, stages.batch_sizes' cut
        assert self._throughput is not None
        self._batches += 1
        self._throughput.update(
            time=clock() - self._start,
            batches=self._batches,
            samples=self._batches * x.shape[0],
            lengths=self._batches * tokens_per_batch,
            flops=self._flops_per_token * tokens_per_batch,
        )
        if not logs_this_step(trainer):  # Lightning would drop the values
            return
        plan = getattr(pl_module, "plan", None)  # the tokens trained on, not the loader's (train/stages.py)
        if plan is not None and plan.stages.batch_sizes and getattr(pl_module, "tokens_per_step", None):
            seen = plan.tokens_through(trainer.global_step, pl_module.tokens_per_step, x.shape[0])
        else:
            seen = micro_batches_trained(trainer) * tokens_per_batch * trainer.world_size  # continues across a resume
        pl_module.log("x_throughput/tokens_seen", float(seen))
        metrics = self._throughput.compute()
        if "device/items_per_sec" in metrics:  # only once the window is full
            tokens_per_sec = metrics["device/items_per_sec"] * trainer.world_size
            pl_module.log("x_throughput/tokens_per_sec", tokens_per_sec)
        if "device/mfu" in metrics:
            pl_module.log("x_throughput/mfu", metrics["device/mfu"])
            pl_module.log("x_throughput/hfu", metrics["device/mfu"] * self._hardware_ratio)

