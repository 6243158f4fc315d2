"""How the model runs, decided in one place (torchtitan's `parallelize`): float8 matmuls, activation checkpointing,
FSDP sharding, torch.compile and the attention kernel are applied here to the plain GPT, from outside, under every
strategy.

The model keeps no runtime flag and the LightningModule decides none of it: it calls `parallelize` once and then
calls the function it returns, `loss_fn(idx, targets, doc_ids, label_smoothing, z_loss) -> LossParts`. What that
function is:
  - one device or DDP, compile on: the model's forward and its loss (model/loss.py `model_loss`) as ONE compiled
    graph, as nanoGPT compiles `forward(idx, targets)`: inductor fuses the head, the fp32 log-softmax and the NLL
    and no fp32 copy of the logits is kept;
  - FSDP (a device mesh given): each block compiled on its own (FSDP's per-block gathers stay outside the compiled
    code) and the loss compiled on its own, so there too the fp32 logits never exist;
  - compile off: the same functions, eager.
Order (torchtitan's): float8 swaps the Linear layers, checkpointing wraps each block, FSDP shards the checkpointed
blocks, compile comes last.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.utils.checkpoint import checkpoint

from gptlab.config.schemas import Runtime
from gptlab.execution.attention_backend import choose_attention_backend
from gptlab.execution.float8 import apply_float8
from gptlab.execution.fsdp2 import shard_gpt
from gptlab.model import GPT
from gptlab.model.loss import LossParts, loss_parts, model_loss

LossFn = Callable[..., LossParts]  # (idx, targets, doc_ids=None, label_smoothing=0.0, z_loss=0.0) -> LossParts


def checkpoint_blocks(model: GPT) -> None:
    """Recompute each block's activations in backward instead of keeping them (memory for ~1/3 more compute).
    The block's own forward is wrapped in place, so parameter names and state_dict keys stay the model's."""
    for block in model.blocks:
        block.forward = functools.partial(_checkpointed, block, block.forward)


def _checkpointed(block: torch.nn.Module, forward: Callable[..., torch.Tensor], x: torch.Tensor,
                  *args: Any) -> torch.Tensor:
    if block.training and torch.is_grad_enabled():  # decoding and validation keep nothing to recompute
        return checkpoint(forward, x, *args, use_reentrant=False)
    return forward(x, *args)


def parallelize(model: GPT, runtime: Runtime, device: torch.device, *, mesh: Optional[DeviceMesh] = None,
                param_dtype: Optional[torch.dtype] = None, reshard_after_forward: bool = True) -> LossFn:
    """Apply `runtime` (and FSDP over `mesh`, when given) to `model` in place, once; return the loss function
    training and validation call."""
    cfg = model.config
    choose_attention_backend(runtime.attention_backend, cfg.n_head, cfg.block_size, cfg.head_dim, device)
    if runtime.float8:  # refused before the run where the GPU or torchao lacks it (early_checks)
        apply_float8(model)
    if runtime.checkpoints_blocks(sharded=mesh is not None):
        checkpoint_blocks(model)
    if mesh is not None:
        shard_gpt(model, mesh, compile=runtime.compile, param_dtype=param_dtype,
                  reshard_after_forward=reshard_after_forward)
        head_loss = torch.compile(loss_parts, dynamic=False) if runtime.compile else loss_parts

        def sharded_loss(idx: torch.Tensor, targets: torch.Tensor, doc_ids: Optional[torch.Tensor] = None,
                         label_smoothing: float = 0.0, z_loss: float = 0.0) -> LossParts:
            logits = model(idx, doc_ids=doc_ids) if doc_ids is not None else model(idx)  # FSDP's root hook gathers
            return head_loss(logits, targets, cfg.vocab_size, label_smoothing, z_loss)

        loss_fn: LossFn = sharded_loss
    else:
        # dynamic=False: a run has few shapes (the micro-batch, a last partial val batch), each compiled once, and
        # static shapes give inductor the most to fuse. A function of the model, not a wrapper module: the
        # state_dict keys stay the model's (no `_orig_mod.`).
        loss_fn = eager_loss_fn(model)
        if runtime.compile:
            loss_fn = torch.compile(loss_fn, dynamic=False)
    return loss_fn


def eager_loss_fn(model: GPT) -> LossFn:
    """The loss function of a model nobody parallelized (evaluation, tests): plain eager."""
    return functools.partial(model_loss, model)
