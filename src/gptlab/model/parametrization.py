"""How the weights start, how the attention scores and logits are scaled, and how each layer's learning rate
scales with width, chosen by model.parametrization from one table.

`standard` is the GPT papers' parametrization: GPT-2's init, N(0, 0.02) for every matrix and embedding and
0.02/sqrt(2M) for the projections that write into the residual stream, so its variance does not grow with depth
(two such writes per block); norms start at gain 1, bias 0; scores times 1/sqrt(D_K); one learning rate.

`mup` is the maximal update parametrization for Adam (Yang et al. 2022, "Tensor Programs V", Table 3, in its
output-multiplier form), with the width multiplier r = n_embd / mup_base_width. Every hidden width (D, H*D_K,
d_ff) is taken to grow by r with n_embd, as it does when n_head is fixed and head_dim, d_ff follow n_embd:
- hidden matrices (every Linear inside the blocks): init std / sqrt(r) (std ∝ 1/sqrt(fan_in)), Adam LR / r;
- embeddings, the head, norm gains and biases ("vector-like": one dimension does not grow): init and LR as at the
  base width;
- logits times 1/r, so the head acts as a readout of init std ∝ 1/fan_in whose Adam update is ∝ 1/fan_in: this
  is why a tied head (W_head = E_1^T) stays consistent, as embedding and readout then share init and LR;
- scores times 1/D_K instead of 1/sqrt(D_K): attn_scale (null = 1/sqrt(D_K at the base width)) is the base
  model's scale, divided by r.
At r = 1 every rule above is the identity, so a mup model at its base width is the standard model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from torch import nn

from gptlab.model.paired_init import GeneratorFor, global_stream

INIT_STD = 0.02


def gpt2_init(model: nn.Module, n_layer: int, hidden_std_mult: float = 1.0,
              generator_for: GeneratorFor = global_stream) -> None:
    """GPT-2's init; the matrices inside the blocks (every Linear but the head) get std times hidden_std_mult.
    `generator_for(module name)` gives each matrix its own random stream (model.paired_init)."""
    head = getattr(model, "head", None)
    residual_std = INIT_STD / math.sqrt(2 * n_layer)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            std = residual_std if getattr(module, "is_residual_projection", False) else INIT_STD
            nn.init.normal_(module.weight, mean=0.0, std=std if module is head else std * hidden_std_mult,
                            generator=generator_for(name))
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD, generator=generator_for(name))
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.RMSNorm):
            nn.init.ones_(module.weight)


def record_init(model: nn.Module, zero_proj: Sequence[str], init_scale: Optional[float],
                streams: GeneratorFor = global_stream) -> None:
    """The speedrun's init, over the parametrization's: the residual projections named in zero_proj ('attn' = W_O,
    'mlp' = f_L) start at 0 (record #5, 2024-10-14), and with init_scale s every other matrix inside the blocks
    starts at U(+-sqrt(3) s / sqrt(fan_in)), std s / sqrt(fan_in) (record #64, 2026-01-30: s = 0.5). The
    embeddings and the head keep theirs. Nothing is touched when both are off. `streams`: each weight's generator by
    its name (paired_init.py), None for torch's global RNG."""
    if not zero_proj and init_scale is None:
        return
    outer = {id(model.head)} if getattr(model, "head", None) is not None else set()
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or id(module) in outer:
            continue
        if getattr(module, "is_residual_projection", None) in zero_proj:
            nn.init.zeros_(module.weight)
        elif init_scale is not None:
            bound = math.sqrt(3) * init_scale / math.sqrt(module.in_features)
            nn.init.uniform_(module.weight, -bound, bound, generator=streams(f"{name}.weight"))


def hidden_matrices(model: nn.Module) -> set[int]:
    """ids of the hidden (matrix-like) weights: 2-D Linear weights other than the head's; both dimensions grow
    with width. Embeddings, the head (tied or not), gains and biases are vector-like."""
    head = getattr(model, "head", None)
    outer = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    outer |= {id(p) for p in head.parameters()} if head is not None else set()
    return {id(m.weight) for m in model.modules()
            if isinstance(m, nn.Linear) and m is not head and id(m.weight) not in outer}


@dataclass(frozen=True)
class Parametrization:
    init: Callable[[nn.Module, int, float, GeneratorFor], None]  # (model, its blocks M, r, streams): the weights' start
    attn_scale: Callable[[Optional[float], int, float], Optional[float]]  # (attn_scale, D_K, r) -> the scale used
    output_mult: Callable[[float], float]  # r -> the factor on the logits
    hidden_lr_mult: Callable[[float], float]  # r -> the factor on the hidden matrices' learning rate


def _mup_attn_scale(base_scale: Optional[float], head_dim: int, r: float) -> float:
    """attn_scale / r; null: 1/sqrt(D_K / r) / r = sqrt(D_K,base) / D_K, muP's 1/D_K that equals eq. 5 at r = 1."""
    return (base_scale if base_scale is not None else math.sqrt(r / head_dim)) / r


PARAMETRIZATIONS = {
    "standard": Parametrization(init=lambda model, n_layer, r, gen: gpt2_init(model, n_layer, 1.0, gen),
                                attn_scale=lambda scale, head_dim, r: scale,
                                output_mult=lambda r: 1.0, hidden_lr_mult=lambda r: 1.0),
    "mup": Parametrization(init=lambda model, n_layer, r, gen: gpt2_init(model, n_layer, r**-0.5, gen),
                           attn_scale=_mup_attn_scale, output_mult=lambda r: 1.0 / r,
                           hidden_lr_mult=lambda r: 1.0 / r),
}
