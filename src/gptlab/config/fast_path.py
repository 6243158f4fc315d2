"""The GPU fast path as defaults: what a run on a CUDA GPU gets with no flag, and a CPU run does not.

`${gptlab.on_cuda:A,B}` is A when the run's trainer.accelerator resolves to a CUDA GPU (gpu, cuda, or auto on a
machine that has one) and B otherwise. The defaults that use it, each turned off by setting the key:

    runtime.compile          true on CUDA: the model with its loss as one compiled graph, or block by block under
                             trainer=fsdp (runtime.compile_scope; execution/parallelize.py)
    model.pad_vocab_to       64 on CUDA: 50257 -> 50304 rows, matmuls on multiples of 64 (padding rows never
                             enter the loss, sampling or exports, and are not counted as parameters)
    trainer.precision        `${gptlab.cuda_precision:}`: bf16-mixed on a GPU with bf16 (Ampere and later),
                             32-true elsewhere

The config records the resolved values (config_resolved.yaml, the checkpoint's hyperparameters), so a run reads
back what it ran with. AdamW's fused kernel is its own default wherever the device has one (optimizer.fused:
null; gptlab clips the gradients itself, so bf16-mixed keeps it). TF32 matmuls are float32_matmul_precision:
high; the attention kernel is chosen by measurement on the GPU (runtime.attention_backend).
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

ON_CUDA, CUDA_PRECISION = "gptlab.on_cuda", "gptlab.cuda_precision"


def runs_on_cuda(accelerator: Any) -> bool:
    """Whether a trainer.accelerator value means a CUDA GPU on this machine (Lightning's `auto` picks one if any)."""
    if accelerator in ("gpu", "cuda"):
        return True
    return accelerator == "auto" and torch.cuda.is_available()


def _accelerator(root: DictConfig) -> Any:
    trainer = root.get("trainer") if isinstance(root, DictConfig) else None
    return trainer.get("accelerator", "auto") if isinstance(trainer, DictConfig) else "auto"


def on_cuda(if_cuda: Any, otherwise: Any, *, _root_: DictConfig) -> Any:
    return if_cuda if runs_on_cuda(_accelerator(_root_)) else otherwise


def cuda_precision(*, _root_: DictConfig) -> str:
    cuda = runs_on_cuda(_accelerator(_root_))
    return "bf16-mixed" if cuda and torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"


def register() -> None:
    OmegaConf.register_new_resolver(ON_CUDA, on_cuda, replace=True)
    OmegaConf.register_new_resolver(CUDA_PRECISION, cuda_precision, replace=True)
