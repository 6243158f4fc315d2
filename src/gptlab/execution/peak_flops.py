"""Dense peak FLOP/s of the GPUs researchers train on, by the name the driver reports, for MFU.

MFU = tokens/s x model FLOPs per token (6N + 12·L·T·D, gptlab.model.training_flops_per_token) / the device's dense
peak at the precision the matmuls run in. The figures are the vendors' datasheet rates WITHOUT structured sparsity
(which datasheets print first, at twice the dense rate: Lightning's own table carries the H200 at that rate, and has
no entry for the name 'NVIDIA H200' the driver reports). For a GPU not listed here, or a clock the datasheet does not
describe, set callbacks.throughput.peak_flops (FLOP/s); the run prints the peak it uses when training starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class DevicePeak:
    name: str
    bf16: float  # dense bf16/fp16 tensor-core FLOP/s, fp32 accumulation
    tf32: float  # dense TF32 tensor-core FLOP/s (fp32 matmuls at float32_matmul_precision=high)
    fp32: float  # plain fp32 FLOP/s (float32_matmul_precision=highest)
    memory_bytes: float


T = 1e12
# First match wins, so the more specific names come first (H100 NVL before H100, GB200 before B200, L40S before L4).
PEAKS: tuple[tuple[str, DevicePeak], ...] = (
    (r"GH200", DevicePeak("GH200 (its H100)", 989.4 * T, 494.7 * T, 66.9 * T, 96e9)),
    (r"H200 NVL", DevicePeak("H200 NVL", 835.5 * T, 417.5 * T, 60 * T, 141e9)),
    (r"H200", DevicePeak("H200 SXM", 989.4 * T, 494.7 * T, 66.9 * T, 141e9)),
    (r"H100 NVL", DevicePeak("H100 NVL", 835.5 * T, 417.5 * T, 60 * T, 94e9)),
    (r"H100 PCIe", DevicePeak("H100 PCIe", 756.5 * T, 378 * T, 51.2 * T, 80e9)),
    (r"H100|H800", DevicePeak("H100 SXM", 989.4 * T, 494.7 * T, 66.9 * T, 80e9)),
    (r"GB200", DevicePeak("GB200 (per GPU)", 2500 * T, 1250 * T, 80 * T, 186e9)),
    (r"B200", DevicePeak("B200", 2250 * T, 1125 * T, 75 * T, 180e9)),
    (r"A100.*40GB", DevicePeak("A100 40GB", 312 * T, 156 * T, 19.5 * T, 40e9)),
    (r"A100|A800", DevicePeak("A100", 312 * T, 156 * T, 19.5 * T, 80e9)),
    (r"L40S", DevicePeak("L40S", 362 * T, 183 * T, 91.6 * T, 48e9)),
    (r"RTX 4090", DevicePeak("RTX 4090", 165.2 * T, 82.6 * T, 82.6 * T, 24e9)),
    (r"\bL4\b", DevicePeak("L4", 121 * T, 60 * T, 30.3 * T, 24e9)),
    (r"\bA10G?\b", DevicePeak("A10", 125 * T, 62.5 * T, 31.2 * T, 24e9)),
)
PRECISION_FIELDS = {"bf16": "bf16", "16": "bf16"}  # by trainer.precision's prefix; 32/64 use tf32 or fp32


def lookup(device_name: str) -> Optional[DevicePeak]:
    """The datasheet peaks of a GPU by its driver name ('NVIDIA H100 80GB HBM3', 'NVIDIA H200', ...), or None."""
    for pattern, peak in PEAKS:
        if re.search(pattern, device_name):
            return peak
    return None


def dense_peak(device_name: str, precision: str, matmul_precision: str = "high") -> Optional[float]:
    """FLOP/s the matmuls of a run at this trainer.precision can reach on this GPU (None: unknown GPU)."""
    peak = lookup(device_name)
    if peak is None:
        return None
    prefix = str(precision).split("-")[0]
    if prefix in PRECISION_FIELDS:
        return peak.bf16
    return peak.fp32 if matmul_precision == "highest" else peak.tf32


def device_peak(device: torch.device, precision: str, override: Optional[float] = None) -> tuple[Optional[float], str]:
    """(peak FLOP/s, where it came from) for MFU on `device`: the override when given, else the table's entry for a
    CUDA device, else None (a CPU, or a GPU the table lacks)."""
    if override:
        return float(override), "callbacks.throughput.peak_flops"
    if device.type != "cuda":
        return None, f"no peak for {device.type}"
    name = torch.cuda.get_device_name(device)
    peak = dense_peak(name, precision, torch.get_float32_matmul_precision())
    if peak is None:
        return None, f"'{name}' is not in gptlab's peak table (set callbacks.throughput.peak_flops for MFU)"
    return peak, f"{lookup(name).name} dense {precision} datasheet peak ('{name}')"


def mfu(tokens_per_sec: float, flops_per_token: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the fraction of the device's peak the model's own FLOPs use (recomputation and
    padding do not count)."""
    return tokens_per_sec * flops_per_token / peak_flops
