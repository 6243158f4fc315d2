"""Distributed strategies whose arguments are Python classes, which a YAML file cannot name directly."""

from __future__ import annotations

from typing import Any

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
