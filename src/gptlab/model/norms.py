"""The model's normalisation layers: LayerNorm (GPT-1/2/3) or RMSNorm (LLaMA), chosen by model.norm_type.

RMSNorm (Zhang & Sennrich 2019) drops LayerNorm's mean subtraction and bias: y = x / sqrt(mean(x^2) + eps) * g.
torch's own modules are used for both, so fused kernels apply where PyTorch has them.
"""

from __future__ import annotations

from torch import nn

from gptlab.model.config import GPTConfig


def make_norm(cfg: GPTConfig, dim: int | None = None) -> nn.Module:
    """A norm over the last `dim` features (default n_embd), of the configured type and epsilon."""
    dim = cfg.n_embd if dim is None else dim
    if cfg.norm_type == "rmsnorm":
        return nn.RMSNorm(dim, eps=cfg.layer_norm_eps)
    return nn.LayerNorm(dim, eps=cfg.layer_norm_eps)


def norm_parameters(cfg: GPTConfig, dim: int) -> int:
    """Parameters of one norm over `dim` features: gain and bias for LayerNorm, the gain alone for RMSNorm."""
    return dim if cfg.norm_type == "rmsnorm" else 2 * dim
