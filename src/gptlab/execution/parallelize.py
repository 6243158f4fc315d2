"""How the model runs, decided in one place (torchtitan's `parallelize`): float8 matmuls, activation checkpointing,
FSDP sharding, torch.compile and the attention kernel are applied here to the plain GPT, from outside, under every
strategy.

The model keeps no runtime flag and the LightningModule decides none of it: it calls `parallelize` once and then
calls the function it returns, `loss_fn(idx, targets, doc_ids, label_smoothing, z_loss) -> LossParts`. What that
function is, by runtime.compile_scope (Runtime.compiled_scope resolves its null):
  - model (the default off FSDP): the model's forward and its loss (model/loss.py `model_loss`) as ONE compiled
    graph, as nanoGPT compiles `forward(idx, targets)`: inductor fuses the head, the fp32 log-softmax and the NLL
    and no fp32 copy of the logits is kept;
  - blocks (the default under FSDP, a device mesh given): each block compiled on its own, in place, and the loss
    compiled on its own. FSDP's per-block gathers and hooks stay outside the compiled code (a whole-model graph
    would break at each of them), identical blocks share one compiled code (one compile, not one per layer), and
    there too the fp32 logits never exist;
  - compile off: the same functions, eager; a member of a fused sweep group (hydra/launcher=fused) gets the function
    that runs its training micro-batches together with the other members' (execution/fused.py).
Order (torchtitan's): float8 swaps the Linear layers, checkpointing wraps each block (execution/checkpointing.py: full
or selective), FSDP shards the checkpointed blocks, compile comes last.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
from torch.distributed.device_mesh import DeviceMesh

from gptlab.config.schemas import Runtime
from gptlab.execution.attention_backend import choose_attention_backend
from gptlab.execution.checkpointing import checkpoint_blocks
from gptlab.execution.float8 import apply_float8
from gptlab.execution.fsdp2 import shard_gpt
from gptlab.execution.fused import fused_loss_fn, member_of_this_thread
from gptlab.model import GPT
from gptlab.model.loss import LossParts, loss_parts, model_loss

LossFn = Callable[..., LossParts]  # (idx, targets, doc_ids=None, label_smoothing=0.0, z_loss=0.0, mtp=None)


def parallelize(model: GPT, runtime: Runtime, device: torch.device, *, mesh: Optional[DeviceMesh] = None,
                param_dtype: Optional[torch.dtype] = None, reshard_after_forward: bool = True) -> LossFn:
    """Apply `runtime` (and FSDP over `mesh`, when given) to `model` in place, once; return the loss function
    training and validation call."""
    cfg = model.config
    choose_attention_backend(runtime.attention_backend, cfg.n_head, cfg.block_size, cfg.head_dim, device)
    if runtime.float8:  # refused before the run where the GPU or torchao lacks it (early_checks)
        apply_float8(model, runtime.float8_layers)
    sharded = mesh is not None
    checkpoint_blocks(model, runtime.checkpointing(sharded))
    scope = runtime.compiled_scope(sharded)
    if scope == "blocks":
        compile_blocks(model)
    if sharded:
        shard_gpt(model, mesh, param_dtype=param_dtype, reshard_after_forward=reshard_after_forward)
    if scope == "model":
        # dynamic=False: a run has few shapes (the micro-batch, a last partial val batch), each compiled once, and
        # static shapes give inductor the most to fuse. A function of the model, not a wrapper module: the
        # state_dict keys stay the model's (no `_orig_mod.`).
        return torch.compile(eager_loss_fn(model), dynamic=False)
    if scope == "blocks":
        return blockwise_loss_fn(model)
    member = member_of_this_thread()
    if member is not None:  # a member of a fused group (hydra/launcher=fused): its training steps run fused
        return fused_loss_fn(model, eager_loss_fn(model), *member)
    return eager_loss_fn(model)  # under FSDP too: the root unit's hook gathers when the model is called


def compile_blocks(model: GPT) -> None:
    """Compile each block on its own, in place (the state_dict keys stay the model's: no `_orig_mod.`). The blocks
    run the same code on parameters dynamo lifts to graph inputs, so identical blocks reuse one compiled graph."""
    for block in model.blocks:
        block.compile(dynamic=False)


def blockwise_loss_fn(model: GPT) -> LossFn:
    """The model's forward as it is (its blocks compiled, and sharded under FSDP, on their own), then the loss,
    compiled on its own so that the fp32 logits are never held."""
    cfg = model.config
    head_loss = torch.compile(loss_parts, dynamic=False)

    def loss_fn(idx: torch.Tensor, targets: torch.Tensor, doc_ids: Optional[torch.Tensor] = None,
                label_smoothing: float = 0.0, z_loss: float = 0.0, mtp: Optional[torch.Tensor] = None) -> LossParts:
        logits = model(idx, doc_ids=doc_ids) if doc_ids is not None else model(idx)  # FSDP's root hook gathers
        return head_loss(logits, targets, cfg.vocab_size, label_smoothing, z_loss, mtp)

    return loss_fn


def eager_loss_fn(model: GPT) -> LossFn:
    """The loss function of a model nobody parallelized (evaluation, tests): plain eager."""
    return functools.partial(model_loss, model)
