"""The position-wise MLP of docs/model.md: f_L ∘ σ ∘ … ∘ σ ∘ f_1, f_i(X) = X W_i + b_i.

Gated activations (Shazeer 2020, "GLU Variants Improve Transformer"): σ takes a 2 d_ff-wide input [A ‖ B] and
returns act(A) ⊙ B, so every layer before an activation is twice as wide: SwiGLU = Swish(X W) ⊙ X V (LLaMA),
GeGLU = GELU(X W) ⊙ X V. W and V are stored stacked in one Linear, which keeps `mlp.layers.0` one matmul.
"""

from __future__ import annotations

import torch
from torch import nn

from gptlab.model.config import GPTConfig


class Gated(nn.Module):
    """act(A) ⊙ B for an input [A ‖ B] split in halves on the last dimension."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=-1)
        return self.act(gate) * value


ACTIVATION_MODULES = {
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # eq. 8, what GPT-2/3 use
    "gelu": lambda: nn.GELU(),  # exact erf form
    "relu": lambda: nn.ReLU(),  # the original Transformer ([S2])
    "swiglu": lambda: Gated(nn.SiLU()),  # Swish_1 = SiLU, as in LLaMA
    "geglu": lambda: Gated(nn.GELU()),  # exact GELU, as in the GLU-variants paper
}


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        widths = [cfg.n_embd] + [cfg.d_ff] * (cfg.mlp_layers - 1) + [cfg.n_embd]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            if i > 0:
                layers.append(ACTIVATION_MODULES[cfg.activation]())
            gated = cfg.gated and i < len(widths) - 2  # feeds an activation
            layers.append(nn.Linear(fan_in, 2 * fan_out if gated else fan_out, bias=cfg.mlp_bias))
        layers[-1].is_residual_projection = True  # f_L writes into the residual stream
        self.layers = nn.Sequential(*layers)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.layers(x))
