"""FSDP2 (`torch.distributed.fsdp.fully_shard`) applied to a plain GPT from outside, as torchtitan does: the model
knows nothing of how it is sharded, and the sharding knows only its block list.

One FSDP unit per Block (gathered for its own forward and backward, freed after) and one root unit for the rest
(token/position embeddings, final norm, head: they share the tied weight, so they must be one unit). Activation
checkpointing (execution/checkpointing.py) wraps each block's forward before it is sharded here, so FSDP's hooks sit
outside the recomputed code, as in torchtitan.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from gptlab.model import GPT


def shard_gpt(model: GPT, mesh: Optional[DeviceMesh], *, param_dtype: Optional[torch.dtype],
              reshard_after_forward: bool) -> None:
    """Shard `model` in place over `mesh`. `param_dtype` (bf16 under trainer.precision=bf16-mixed): what the gathered
    weights and the gradients' reduce-scatter are cast to; the sharded master weights and Adam states stay fp32
    and gradients are reduced in fp32. Blocks compiled before (runtime.compile_scope=blocks) stay compiled on
    their own, so FSDP's hooks stay outside the compiled code."""
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    # The root is used last in backward, so it is never resharded after forward: its weights are needed again first.
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
