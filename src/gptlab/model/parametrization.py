"""How the weights start (and, for parametrizations that need it, how their learning rates scale with width),
chosen by model.parametrization from one table.

`standard` is the GPT papers' parametrization: GPT-2's init, N(0, 0.02) for every matrix and embedding and
0.02/sqrt(2M) for the projections that write into the residual stream, so its variance does not grow with depth
(two such writes per block); norms start at gain 1, bias 0. muP (Yang et al. 2022), whose init and per-layer
learning rates make a small model's best LR transfer to a wide one, is the next entry this table is for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from torch import nn

INIT_STD = 0.02


def standard_init(model: nn.Module, n_layer: int) -> None:
    residual_std = INIT_STD / math.sqrt(2 * n_layer)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            std = residual_std if getattr(module, "is_residual_projection", False) else INIT_STD
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.RMSNorm):
            nn.init.ones_(module.weight)


@dataclass(frozen=True)
class Parametrization:
    init: Callable[[nn.Module, int], None]  # (the model, its number of blocks M): every weight's starting value


PARAMETRIZATIONS = {"standard": Parametrization(init=standard_init)}
