"""The model's normalisation layers, chosen by model.norm_type from one table: LayerNorm (GPT-1/2/3) or RMSNorm
(LLaMA).

RMSNorm (Zhang & Sennrich 2019) drops LayerNorm's mean subtraction and bias: y = x / sqrt(mean(x^2) + eps) * g.
torch's own modules are used for both, so fused kernels apply where PyTorch has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn


@dataclass(frozen=True)
class NormKind:
    build: Callable[[int, float], nn.Module]  # (features, eps) -> the layer
    params_per_feature: int  # gain and bias, or the gain alone


NORMS = {
    "layernorm": NormKind(lambda dim, eps: nn.LayerNorm(dim, eps=eps), params_per_feature=2),
    "rmsnorm": NormKind(lambda dim, eps: nn.RMSNorm(dim, eps=eps), params_per_feature=1),
}


def make_norm(kind: str, dim: int, eps: float) -> nn.Module:
    """A norm of `kind` (model.norm_type) over the last `dim` features."""
    return NORMS[kind].build(dim, eps)


def norm_parameters(kind: str, dim: int) -> int:
    return NORMS[kind].params_per_feature * dim
