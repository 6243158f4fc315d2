"""Distributed strategies whose arguments are Python classes, which a YAML file cannot name directly."""

from __future__ import annotations

from typing import Any, Optional

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


def check_optimizer_fits_strategy(optimizer_target: Optional[str], strategy_target: Optional[str]) -> None:
    """Muon orthogonalizes whole matrices; FSDP hands each rank a flat shard of them, so refuse before training."""
    if optimizer_target and optimizer_target.endswith(".muon") and strategy_target and "fsdp" in strategy_target:
        raise ConfigError("optimizer=muon cannot run under trainer=fsdp: FSDP shards each weight matrix across "
                          "ranks and Muon's Newton–Schulz step needs the whole matrix. Use trainer=ddp (each rank "
                          "holds full matrices) or optimizer=adamw with FSDP.")
