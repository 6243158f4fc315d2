"""Validation loss and bits per byte of the whole validation set or of one part of it (a mixture's source): sums of
the NLL (nats), of the scored targets and of the bytes they stand for, synchronised across ranks by torchmetrics.

val/loss is the summed NLL over the summed target count: the mean over scored tokens, whatever the batch size, the
size of the last (partial) batch or the number of ranks and their unequal shares. A mean of per-batch means (what
torchmetrics' MeanMetric gives with nan_strategy="disable", which drops the weight it is passed) weighs a partial
batch's tokens more than the others', so the loss moved with data.batch_size in the 4th decimal.

The sums are float64 (float32 on Apple's mps, which has no float64): a float32 running sum of thousands of batches
drifts by ~1e-6 relative, enough to tell two batch sizes apart. Nothing is read from the device per batch:
torchmetrics' NaN check (a GPU sync each update) is off, so a NaN loss gives a NaN val/loss, as it should, and the
target count is a device fill, not a Python number copied with a blocking copy. The sums are read once (compute)."""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn
from torchmetrics import SumMetric


class ValidationSums(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.nats, self.targets, self.bytes = (SumMetric(nan_strategy="disable") for _ in range(3))
        self.use_device(torch.device("cpu"))

    def use_device(self, device: torch.device) -> None:
        """Keep the sums in the widest float `device` has (before the module is moved there)."""
        dtype = torch.float32 if device.type == "mps" else torch.float64
        for metric in (self.nats, self.targets, self.bytes):
            metric.set_dtype(dtype)

    def update(self, loss: torch.Tensor, targets: torch.Tensor, token_bytes: Optional[torch.Tensor]) -> None:
        """Add a batch: `loss` is its mean NLL over the `targets.numel()` targets it scored."""
        dtype = self.nats.dtype
        count = torch.full((), targets.numel(), dtype=dtype, device=loss.device)  # a device fill, no host copy
        self.nats.update(loss.detach().to(dtype) * count)
        self.targets.update(count)
        if token_bytes is not None:
            self.bytes.update(token_bytes[targets].sum().to(dtype))

    def compute(self, with_bpb: bool) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(val loss, bits per byte or None), in float32 as every other logged scalar, then reset for the next
        validation."""
        nats = self.nats.compute()
        loss = (nats / self.targets.compute()).float()
        bpb = (nats / (math.log(2) * self.bytes.compute())).float() if with_bpb else None
        for metric in (self.nats, self.targets, self.bytes):
            metric.reset()
        return loss, bpb
