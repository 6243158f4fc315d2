"""Activation checkpointing of each block, full or selective (runtime.activation_checkpointing), applied from outside
by execution/parallelize.py; and the FLOPs each mode recomputes, which the hardware FLOPs utilisation counts.

- full: a block keeps only its input; backward runs the block's forward again (one more forward of every block:
  about +1/3 of the blocks' training FLOPs).
- selective (torchtitan's op-level policy, Korthikanti et al. 2022's idea): a block keeps the outputs of its matmuls
  and of the attention kernel; backward recomputes only what lies between them (norms, GELU, dropout, residual adds,
  RoPE): elementwise work, no matmul, so it recomputes no model FLOPs.
Either way the block's own forward is wrapped in place: parameter names and state_dict keys stay the model's.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from gptlab.lightning_internals import matmul_and_attention_ops
from gptlab.model import GPTConfig, training_flops_per_token

MODES = ("none", "full", "selective")
SAVED_OPS = matmul_and_attention_ops()  # the matmuls and the attention kernels, float8's scaled matmul included


def _keep_matmuls(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_contexts() -> tuple[Any, Any]:
    return create_selective_checkpoint_contexts(_keep_matmuls)


def checkpoint_blocks(model: torch.nn.Module, mode: str) -> None:
    """Wrap each block's forward for `mode` ("full" or "selective"; "none" leaves the model as it is)."""
    assert mode in MODES, mode
    if mode == "none":
        return
    extra = {"context_fn": _selective_contexts} if mode == "selective" else {}
    for block in model.blocks:
        block.forward = functools.partial(_checkpointed, block, block.forward, extra)


def _checkpointed(block: torch.nn.Module, forward: Callable[..., torch.Tensor], extra: dict[str, Any],
                  x: torch.Tensor, *args: Any) -> torch.Tensor:
    if block.training and torch.is_grad_enabled():  # decoding and validation keep nothing to recompute
        return checkpoint(forward, x, *args, use_reentrant=False, **extra)
    return forward(x, *args)


def recomputed_flops_per_token(cfg: GPTConfig, mode: str) -> int:
    """Matmul FLOPs per token that `mode` computes again in backward, in training_flops_per_token's terms (whose
    forward is a third of the total): full = one forward of every block (attention included, the head not), less
    the MLP's last layer where nothing needs its output (torch's checkpoint stops recomputing once backward has what
    it needs: in a pre-LN block without dropout, that output only joins the residual sum); selective and none = 0
    (selective recomputes elementwise ops only, which FLOPs counts leave out)."""
    assert mode in MODES, mode
    if mode != "full":
        return 0
    flops = training_flops_per_token(cfg)
    head = 6 * cfg.n_embd * cfg.padded_vocab_size  # the head is not in a block: never recomputed
    forward = (flops["total"] - head) // 3
    unneeded = cfg.norm == "pre" and cfg.dropout == 0
    return forward - (2 * cfg.d_ff * cfg.n_embd * cfg.n_layer if unneeded else 0)


def hardware_flops_per_token(cfg: GPTConfig, mode: str) -> int:
    """FLOPs per token the device really runs: the model's (MFU's numerator) plus what checkpointing recomputes."""
    return training_flops_per_token(cfg)["total"] + recomputed_flops_per_token(cfg, mode)
