"""Training FLOPs per token, for MFU.

Kept as one small function so a fuller count (e.g. issue 3's parameter accounting, or FlopCounterMode on the
meta device as litgpt does) can replace it without touching the callers.
"""

from __future__ import annotations

from torch import nn

from gptlab.model import GPT


def matmul_parameters(model: nn.Module) -> int:
    """Weights that take part in a matmul per token: every Linear, the head included. Embedding lookups,
    biases and LayerNorm gains cost no matmul FLOPs; a tied head counts once, as the head."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def train_flops_per_token(model: GPT) -> int:
    """6N + 6·M·T·H·(D_K + D_V): forward 2 FLOPs per weight per token and backward twice that (6N, Kaplan
    et al. 2020), plus the two attention matmuls QK^T and SV over T keys (PaLM appendix B's 12·M·H·D_K·T when
    D_V = D_K). The causal mask's halving is not credited, as in PaLM and nanoGPT, so MFUs stay comparable."""
    cfg = model.config
    attention = 6 * cfg.n_layer * cfg.block_size * cfg.n_head * (cfg.head_dim + cfg.v_head_dim)
    return 6 * matmul_parameters(model) + attention
