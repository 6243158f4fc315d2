"""Which of SDPA's CUDA kernels runs dense causal attention: the fastest one for this model on this GPU, measured.

PyTorch ships several exact kernels for `scaled_dot_product_attention` (cuDNN's, FlashAttention-2, memory-efficient)
and picks by a fixed priority. Which is fastest depends on the GPU, the head size and the sequence length (on Hopper
cuDNN's often beats FlashAttention-2's), so runtime.attention_backend=auto times each one that accepts the model's
shape (forward and backward, bf16, a few repeats after a warm-up: well under a second) and puts the fastest first in
SDPA's priority for the whole process. The others stay enabled behind it, so a call the first cannot take (a mask,
dropout, another dtype) still runs on the next. torch.compile traces SDPA to the kernel chosen here.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from typing import Optional

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

log = logging.getLogger(__name__)

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
MEASURED = ("cudnn", "flash", "efficient")  # exact fused kernels; math is the slow reference
_PRIORITY = ExitStack()  # the process-wide priority set below stays in force until the process ends


def time_backend(name: str, batch: int, heads: int, seq: int, head_dim: int, device: torch.device,
                 repeats: int = 5) -> Optional[float]:
    """Milliseconds of one causal forward+backward with this backend alone, or None where it refuses the shape."""
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn_like(q)
    try:
        with sdpa_kernel(BACKENDS[name]):
            for _ in range(2):  # warm-up: kernel selection, workspace allocation
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeats):
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
            end.record()
            torch.cuda.synchronize(device)
    except RuntimeError:  # "No available kernel": this backend does not take this shape or GPU
        return None
    return start.elapsed_time(end) / repeats


def fastest_backend(heads: int, seq: int, head_dim: int, device: torch.device) -> tuple[str, dict[str, float]]:
    """The measured fastest backend and every measured time (ms). ~16k tokens a call: enough work to rank them."""
    batch = max(1, 16384 // seq)
    times = {name: t for name in MEASURED
             if (t := time_backend(name, batch, heads, seq, head_dim, device)) is not None}
    if not times:
        return "math", {}
    return min(times, key=times.__getitem__), times


def use_backend_first(name: str) -> None:
    """Put `name` first in SDPA's priority for the rest of the process, the other kernels after it."""
    order = [BACKENDS[name]] + [b for n, b in BACKENDS.items() if n != name]
    _PRIORITY.close()  # a second choice (another fit in this process) replaces the first
    _PRIORITY.enter_context(sdpa_kernel(order, set_priority=True))


def choose_attention_backend(setting: str, heads: int, seq: int, head_dim: int, device: torch.device) -> Optional[str]:
    """Applies runtime.attention_backend on a CUDA device and returns the kernel put first (None off CUDA)."""
    if device.type != "cuda":
        return None
    if setting == "auto":
        setting, times = fastest_backend(heads, seq, head_dim, device)
        log.info("attention: SDPA %s kernel, the fastest measured here (%s; fwd+bwd, T=%d)", setting,
                 ", ".join(f"{n} {t:.2f} ms" for n, t in sorted(times.items(), key=lambda kv: kv[1])), seq)
    use_backend_first(setting)
    return setting
