"""Distributed strategies whose arguments are Python classes, which a YAML file cannot name directly."""

from __future__ import annotations

from typing import Any, Optional

from gptlab.config.fsdp_keys import fsdp_key_problem
from gptlab.errors import ConfigError
from gptlab.execution.fsdp_strategy import GPTFSDPStrategy


def fsdp(reshard_after_forward: bool = True, **kwargs: Any) -> GPTFSDPStrategy:
    """FSDP2 that shards each transformer block as one unit (parameters, gradients, optimizer state); activation
    checkpointing is runtime.activation_checkpointing (on under FSDP unless set false). Runs on CPU (gloo) and CUDA
    (NCCL)."""
    problem = fsdp_key_problem(kwargs)  # also a config rule; here for a strategy built from Python
    if problem:
        raise ConfigError(problem)
    return GPTFSDPStrategy(reshard_after_forward=reshard_after_forward, **kwargs)


def uses_fsdp(trainer_cfg: Any) -> bool:
    """Whether a composed `trainer` group runs under trainer=fsdp (this module's `fsdp`)."""
    strategy = trainer_cfg.get("strategy") if trainer_cfg is not None else None
    return hasattr(strategy, "get") and str(strategy.get("_target_", "")).endswith("strategies.fsdp")


def check_optimizer_fits_strategy(optimizer_target: Optional[str], strategy_target: Optional[str]) -> None:
    """Muon orthogonalizes whole matrices; FSDP hands each rank a flat shard of them, so refuse before training."""
    if optimizer_target and optimizer_target.endswith(".muon") and strategy_target and "fsdp" in strategy_target:
        raise ConfigError("optimizer=muon cannot run under trainer=fsdp: FSDP shards each weight matrix across "
                          "ranks and Muon's Newton–Schulz step needs the whole matrix. Use trainer=ddp (each rank "
                          "holds full matrices) or optimizer=adamw with FSDP.")
