"""runtime.float8: the model's matmuls in float8 with torchao's float8 training (dynamic per-tensor scaling), for
GPUs with float8 tensor cores (compute capability 8.9 and up: H100, H200, L4, L40, RTX 4090).

Applied from outside, like compile and sharding: `apply_float8(model)` swaps nn.Linear modules for torchao's
Float8Linear before the model is compiled and sharded; the weights stay in their dtype, and each matmul casts its
inputs to float8 with a scale per tensor. Layers whose dims are not multiples of 16 (float8 matmul needs them) and
the head (the logits are the most precision-sensitive matmul, and its vocabulary dim is often odd) keep their
Linear. torchao is an optional dependency: `pip install torchao`, or gptlab's `float8` extra.
"""

from __future__ import annotations

from typing import Optional

from torch import nn

from gptlab.errors import ConfigError

MIN_CAPABILITY = (8, 9)  # Ada and Hopper: the first GPUs with float8 tensor cores
ALIGNMENT = 16  # float8 matmuls (torch._scaled_mm) need both dims of the weight divisible by this
SKIPPED_MODULES = ("head",)  # the readout stays in bf16


def torchao_available() -> bool:
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        return False
    return True


def check_float8(device_capability: Optional[tuple[int, int]], torchao_available: bool,
                 device_name: str = "this GPU") -> None:
    """Refuse runtime.float8=true where it cannot run: no CUDA GPU (capability None), a GPU older than 8.9, or no
    torchao. The hardware is checked first: installing torchao would not help on a GPU without float8."""
    if device_capability is None:
        raise ConfigError("runtime.float8=true needs a CUDA GPU with float8 tensor cores (compute capability >= 8.9: "
                          "H100, H200, L4, L40) and this run has none; set runtime.float8=false.")
    if tuple(device_capability) < MIN_CAPABILITY:
        major, minor = device_capability
        raise ConfigError(f"runtime.float8=true needs float8 tensor cores (compute capability >= 8.9: H100, H200, "
                          f"L4, L40); {device_name} has compute capability {major}.{minor}; set runtime.float8=false.")
    if not torchao_available:
        raise ConfigError("runtime.float8=true uses torchao's float8 training, which is not installed: "
                          "pip install torchao (or pip install 'gptlab[float8]'), or set runtime.float8=false.")


def converts(module: nn.Module, name: str) -> bool:
    """Whether apply_float8 swaps this module: an nn.Linear outside SKIPPED_MODULES with both dims multiples of 16."""
    return (isinstance(module, nn.Linear) and name.split(".")[-1] not in SKIPPED_MODULES
            and module.in_features % ALIGNMENT == 0 and module.out_features % ALIGNMENT == 0)


def apply_float8(model: nn.Module) -> list[str]:
    """Swap the model's eligible Linear layers (`converts`) for torchao's Float8Linear, in place; returns their
    names. Call it after check_float8, on the built model, before torch.compile and FSDP's fully_shard."""
    from torchao.float8 import convert_to_float8_training

    names = [name for name, module in model.named_modules() if converts(module, name)]
    # Marks the model's init reads (parametrization.py), kept for a reset_parameters after the swap (meta-device
    # init under FSDP): torchao's Float8Linear is a new module that carries only the weights.
    marks = {name: vars(module)["is_residual_projection"] for name, module in model.named_modules()
             if name in names and "is_residual_projection" in vars(module)}
    convert_to_float8_training(model, module_filter_fn=converts)
    for name, mark in marks.items():
        model.get_submodule(name).is_residual_projection = mark
    return names


def check_float8_here(accelerator: str) -> None:
    """check_float8 for this machine: the first GPU's capability, unless the run trains on the CPU."""
    import torch

    on_gpu = accelerator != "cpu" and torch.cuda.is_available()
    capability = torch.cuda.get_device_capability(0) if on_gpu else None
    hardware_ok = capability is not None and tuple(capability) >= MIN_CAPABILITY
    # torchao is imported only where it could run: its import logs warnings on a CPU-only torch
    check_float8(capability, hardware_ok and torchao_available(),
                 torch.cuda.get_device_name(0) if on_gpu else "this machine")
