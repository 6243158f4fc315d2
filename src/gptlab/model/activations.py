"""The MLP's activation σ, chosen by model.activation from one table.

Gated activations (Shazeer 2020, "GLU Variants Improve Transformer"): σ takes a 2 d_ff-wide input [A ‖ B] and
returns act(A) ⊙ B, so every layer before an activation is twice as wide: SwiGLU = Swish(X W) ⊙ X V (LLaMA),
GeGLU = GELU(X W) ⊙ X V.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


class Gated(nn.Module):
    """act(A) ⊙ B for an input [A ‖ B] split in halves on the last dimension."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=-1)
        return self.act(gate) * value


class ReLUSquared(nn.Module):
    """relu(x)^2, the speedrun's MLP activation (modded-nanogpt record #5, 2024-10-14; So et al. 2021, Primer)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).square()


@dataclass(frozen=True)
class Activation:
    build: Callable[[], nn.Module]
    gated: bool = False  # its input is [A ‖ B]: the layer feeding it is twice as wide


ACTIVATIONS = {
    "gelu_tanh": Activation(lambda: nn.GELU(approximate="tanh")),  # eq. 8, what GPT-2/3 use
    "gelu": Activation(lambda: nn.GELU()),  # exact erf form
    "relu": Activation(lambda: nn.ReLU()),  # the original Transformer ([S2])
    "relu2": Activation(ReLUSquared),  # the GPT-2 speedrun's (record #5)
    "swiglu": Activation(lambda: Gated(nn.SiLU()), gated=True),  # Swish_1 = SiLU, as in LLaMA
    "geglu": Activation(lambda: Gated(nn.GELU()), gated=True),  # exact GELU, as in the GLU-variants paper
}
