"""Distributed strategies whose arguments are Python classes, which a YAML file cannot name directly."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.strategies import FSDPStrategy

from gptlab.errors import ConfigError
from gptlab.model.block import Block


def fsdp(activation_checkpointing: bool = True, **kwargs: Any) -> FSDPStrategy:
    """FSDP that shards each transformer block as one unit (parameters, gradients, optimizer state) and,
    when asked, recomputes each block's activations in backward instead of storing them."""
    if not torch.cuda.is_available():
        # Lightning's FSDP refuses every accelerator but CUDA; say so before the Trainer's deep traceback.
        raise ConfigError(
            "trainer=fsdp needs CUDA GPUs (Lightning's FSDP does not run on CPU); use trainer=ddp on CPU."
        )
    return FSDPStrategy(
        auto_wrap_policy={Block},
        activation_checkpointing_policy={Block} if activation_checkpointing else None,
        **kwargs,
    )
