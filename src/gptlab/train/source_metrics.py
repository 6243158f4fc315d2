"""Validation loss and bits per byte of the whole validation set or of one part of it (a mixture's source): the
token-weighted NLL, nats and bytes that GPTLitModule sums once for the set and once per source, synchronised across
ranks by torchmetrics.

Nothing is read from the device per batch: torchmetrics' NaN check (`if isnan(x).any()`, a GPU sync each update) is
off, so a NaN loss gives a NaN val/loss, as it should, and the token count is a device tensor, not a Python number
that each update would copy to the device with a blocking copy. The sums are read once, at the end (compute)."""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn
from torchmetrics import MeanMetric, SumMetric


class ValidationSums(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.loss, self.nats, self.bytes = (metric(nan_strategy="disable") for metric in (MeanMetric, SumMetric,
                                                                                          SumMetric))

    def update(self, loss: torch.Tensor, targets: torch.Tensor, token_bytes: Optional[torch.Tensor]) -> None:
        count = torch.full_like(loss, targets.numel())  # a fill on the device, not a copy from the host
        self.loss.update(loss, weight=count)
        if token_bytes is not None:
            self.nats.update(loss * count)
            self.bytes.update(token_bytes[targets].sum())

    def compute(self, with_bpb: bool) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(val loss, bits per byte or None), then reset for the next validation."""
        loss = self.loss.compute()
        bpb = self.nats.compute() / (math.log(2) * self.bytes.compute()) if with_bpb else None
        for metric in (self.loss, self.nats, self.bytes):
            metric.reset()
        return loss, bpb
