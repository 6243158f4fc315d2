"""The position-wise MLP of docs/model.md: f_L ∘ σ ∘ … ∘ σ ∘ f_1, f_i(X) = X W_i + b_i.

σ comes from activations.ACTIVATIONS. For a gated σ, W and V are stored stacked in one Linear, which keeps
`mlp.layers.0` one matmul.
"""

from __future__ import annotations

import torch
from torch import nn

from gptlab.model.activations import ACTIVATIONS
from gptlab.model.config import GPTConfig


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        activation = ACTIVATIONS[cfg.activation]
        widths = [cfg.n_embd] + [cfg.d_ff] * (cfg.mlp_layers - 1) + [cfg.n_embd]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            if i > 0:
                layers.append(activation.build())
            gated = activation.gated and i < len(widths) - 2  # feeds an activation
            layers.append(nn.Linear(fan_in, 2 * fan_out if gated else fan_out, bias=cfg.mlp_bias))
        layers[-1].is_residual_projection = "mlp"  # f_L writes into the residual stream
        self.layers = nn.Sequential(*layers)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.layers(x))
