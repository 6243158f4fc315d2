"""The position-wise MLP of docs/model.md: f_L ∘ σ ∘ … ∘ σ ∘ f_1, f_i(X) = X W_i + b_i."""

from __future__ import annotations

import torch
from torch import nn

from gptlab.model.config import GPTConfig

ACTIVATION_MODULES = {
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # eq. 8, what GPT-2/3 use
    "gelu": lambda: nn.GELU(),  # exact erf form
    "relu": lambda: nn.ReLU(),  # the original Transformer ([S2])
}


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        widths = [cfg.n_embd] + [cfg.d_ff] * (cfg.mlp_layers - 1) + [cfg.n_embd]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            if i > 0:
                layers.append(ACTIVATION_MODULES[cfg.activation]())
            layers.append(nn.Linear(fan_in, fan_out, bias=cfg.mlp_bias))
        layers[-1].is_residual_projection = True  # f_L writes into the residual stream
        self.layers = nn.Sequential(*layers)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.layers(x))
