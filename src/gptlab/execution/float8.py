"""runtime.float8: the model's matmuls in float8 with torchao's float8 training (dynamic per-tensor scaling), for
GPUs with float8 tensor cores (compute capability 8.9 and up: H100, H200, L4, L40, RTX 4090).

Applied from outside, like compile and sharding: `apply_float8(model)` swaps nn.Linear modules for torchao's
Float8Linear before the model is compiled and sharded; the weights stay in their dtype, and each matmul casts its
inputs to float8 with a scale per tensor. runtime.float8_layers chooses which layers: attention and mlp by default;
the head (the logits are the most precision-sensitive matmul) only when asked, as modded-nanogpt's fp8 head (record
19, 2025-01-13) and fp8 MLP (records 84, 2026-05-21, and 89, 2026-07-17) are. Layers whose dims are not multiples of
16 (float8 matmul needs them) keep their Linear; a chosen kind with no such layer is refused. torchao is an optional
dependency: `pip install torchao`, or gptlab's `float8` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from torch import nn

from gptlab.errors import ConfigError

MIN_CAPABILITY = (8, 9)  # Ada and Hopper: the first GPUs with float8 tensor cores
ALIGNMENT = 16  # float8 matmuls (torch._scaled_mm) need both dims of the weight divisible by this
LAYERS = ("attention", "mlp", "head")  # runtime.float8_layers' kinds
DEFAULT_LAYERS = ("attention", "mlp")  # the readout stays in bf16 unless asked


def layer_of(name: str) -> Optional[str]:
    """The float8_layers kind of a Linear by its name in the GPT: head, blocks.<i>.attn.*, blocks.<i>.mlp.*."""
    if name == "head":
        return "head"
    parts = name.split(".")
    return {"attn": "attention", "mlp": "mlp"}.get(parts[2]) if len(parts) > 2 and parts[0] == "blocks" else None


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


def converts(module: nn.Module, name: str, layers: Sequence[str] = DEFAULT_LAYERS) -> bool:
    """Whether apply_float8 swaps this module: an nn.Linear of a kind in `layers` with both dims multiples of 16."""
    return (isinstance(module, nn.Linear) and layer_of(name) in layers
            and module.in_features % ALIGNMENT == 0 and module.out_features % ALIGNMENT == 0)


def apply_float8(model: nn.Module, layers: Sequence[str] = DEFAULT_LAYERS) -> list[str]:
    """Swap the model's eligible Linear layers (`converts`) of the kinds in `layers` for torchao's Float8Linear, in
    place; returns their names. Call it after check_float8, on the built model, before torch.compile and FSDP's
    fully_shard. A kind asked for whose every layer has a dim that is not a multiple of 16 is refused."""
    from torchao.float8 import convert_to_float8_training

    names = [name for name, module in model.named_modules() if converts(module, name, layers)]
    missing = [kind for kind in layers if not any(layer_of(name) == kind for name in names)]
    if missing:
        raise ConfigError(f"runtime.float8_layers={list(layers)} asks for {', '.join(missing)} in float8, but no such "
                          f"layer has both dims multiples of {ALIGNMENT} (float8 matmuls need them); set "
                          "model.pad_vocab_to=64 for the head, or leave the kind out of runtime.float8_layers.")
    # Marks the model's init reads (parametrization.py), kept for a reset_parameters after the swap (meta-device
    # init under FSDP): torchao's Float8Linear is a new module that carries only the weights.
    marks = {name: vars(module)["is_residual_projection"] for name, module in model.named_modules()
             if name in names and "is_residual_projection" in vars(module)}
    convert_to_float8_training(model, module_filter_fn=lambda module, name: converts(module, name, layers))
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
