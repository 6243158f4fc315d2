"""A muP model as the standard-parametrization model that computes the same logits, for formats without muP's
two multipliers (Hugging Face's GPT-2, GPT-1 and Llama scale scores by 1/sqrt(D_K) and have no logit factor).

Both multipliers are linear, so they fold into weights exactly: muP's score scale s is c = s * sqrt(D_K) times
eq. 5's, and scaling the query by c scales Q K^T by c (RoPE rotates q linearly, ALiBi's bias is added after the
scale, so neither changes that); the query is W_Q's rows and bias, or with QK-norm the gain (and bias) of the
query's norm, applied last. The logit factor 1/r folds into W_head; a tied head cannot carry it without changing
the embedding, so it is written untied (W_head = E_1^T / r, the embedding unchanged).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from gptlab.model.gpt import GPT


def _scale_queries(model: GPT, state: dict[str, torch.Tensor], c: float) -> None:
    cfg = model.config
    for i in range(cfg.n_layer):
        prefix = f"blocks.{i}.attn."
        if cfg.qk_norm:
            for key in (f"{prefix}q_norm.weight", f"{prefix}q_norm.bias"):
                if key in state:
                    state[key] = state[key] * c
            continue
        rows = cfg.n_head * cfg.head_dim  # W_Q is the first H * D_K rows of the fused projection
        for key in (f"{prefix}qkv.weight", f"{prefix}qkv.bias"):
            if key in state:
                state[key] = torch.cat([state[key][:rows] * c, state[key][rows:]])


def as_standard(model: GPT) -> GPT:
    """`model` itself under the standard parametrization, else a standard GPT whose logits equal its logits."""
    cfg = model.config
    if cfg.parametrization == "standard":
        return model
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    _scale_queries(model, state, cfg.scores_scale * math.sqrt(cfg.head_dim))
    untie = cfg.tie_weights and cfg.output_mult != 1.0
    state["head.weight"] = state["head.weight"] * cfg.output_mult
    baked = GPT(replace(cfg, parametrization="standard", attn_scale=None,
                        tie_weights=cfg.tie_weights and not untie))
    baked.load_state_dict(state, strict=True)
    return baked
