"""Parameter and compute accounting from a GPTConfig alone: GPT-3 175B is counted without allocating it.

The formulas mirror the modules one-to-one (docs/model.md; [S3]'s table in docs/presets.md); tests check them against
`sum(p.numel())` of built models, so a change to the modules that is not reflected here fails.
"""

from __future__ import annotations

from typing import Any

from gptlab.model.config import GPTConfig
from gptlab.model.norms import norm_parameters
from gptlab.model.positions import POSITIONS
from gptlab.model.smear import SMEAR_CHANNELS
from gptlab.model.value_embeddings import GATE_CHANNELS as VE_GATE_CHANNELS

COMPONENTS = ("embedding", "position", "attention", "mlp", "norm", "head", "scalars")


def _linear(fan_in: int, fan_out: int, bias: bool) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def count_parameters(cfg: GPTConfig) -> dict[str, int]:
    """Parameters per component and their `total`; a tied head adds nothing ([S3]). The speedrun's tables (value
    embeddings, the bigram embedding) are token lookups and count as `embedding`; its gates and learned scalars
    (residual, x0, skip, smear, value-embedding gates) are `scalars`."""
    d, D, M = cfg.padded_vocab_size, cfg.n_embd, cfg.n_layer
    qk_width, v_width = cfg.n_head * cfg.head_dim, cfg.n_head * cfg.v_head_dim
    attention = _linear(D, 2 * qk_width + v_width, cfg.qkv_bias) + _linear(v_width, D, cfg.attn_bias)
    attention += 2 * norm_parameters(cfg.norm_type, cfg.head_dim) if cfg.qk_norm else 0  # q_norm and k_norm gains
    widths = [D] + [cfg.d_ff] * (cfg.mlp_layers - 1) + [D]
    gate = 2 if cfg.gated else 1  # a gated activation's input is [A ‖ B]: layers feeding one are twice as wide
    mlp = sum(_linear(a, b * (gate if i < len(widths) - 2 else 1), cfg.mlp_bias)
              for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])))
    layer_norm = norm_parameters(cfg.norm_type, D)  # gamma and beta (LayerNorm), gamma alone (RMSNorm)
    attn_layers, mlp_layers = M - len(cfg.no_attn_layers), M - len(cfg.no_mlp_layers)
    ve_gate = cfg.n_head * 2 * VE_GATE_CHANNELS if cfg.value_embed_gate else 0
    scalars = 2 * (attn_layers + mlp_layers) if cfg.residual_scalars else 0
    scalars += (M if cfg.x0_mix else 0) + len(cfg.skips) + len(cfg.value_embed_layers) * ve_gate
    scalars += (min(SMEAR_CHANNELS, D) + 1) if cfg.smear else 0
    counts = {
        "embedding": d * D + len(cfg.value_embed_layers) * d * v_width + cfg.bigram_vocab * D,
        "position": POSITIONS[cfg.pos_emb].parameters(cfg.block_size, D),
        "attention": attn_layers * attention,
        "mlp": mlp_layers * mlp,
        "norm": (attn_layers + mlp_layers + (1 if cfg.final_norm else 0)) * layer_norm,
        "head": 0 if cfg.tie_weights else D * d,
        "scalars": scalars,
    }
    counts["total"] = sum(counts.values())
    return counts


def padding_parameters(cfg: GPTConfig) -> int:
    """Parameters in the rows model.pad_vocab_to adds (the embedding's, and an untied head's): tensor size, not model.
    They never enter the loss, sampling or an export, so what a run reports as its parameters leaves them out."""
    return (cfg.padded_vocab_size - cfg.vocab_size) * cfg.n_embd * (1 if cfg.tie_weights else 2)


def held_parameters(model: Any) -> int:
    """The parameters `model` holds now, padding rows left out: after model.untie_at untied the head, its
    embedding of its own too (run_summary.json's parameters_after_untie)."""
    cfg = model.config
    vocab_tensors = 2 if not cfg.tie_weights or bool(getattr(model, "head_untied", False)) else 1
    return model.num_parameters() - (cfg.padded_vocab_size - cfg.vocab_size) * cfg.n_embd * vocab_tensors


def built_parameters(model: Any) -> int:
    """The parameters a run reports (banner, run_summary.json, the reports): the model as built, a tied head once,
    padding rows left out; the embedding that model.untie_at's untying made is not counted (the model was built,
    and is compared, tied)."""
    untied = bool(getattr(model, "head_untied", False)) and model.config.tie_weights
    return held_parameters(model) - (model.config.vocab_size * model.config.n_embd if untied else 0)


def training_flops_per_token(cfg: GPTConfig) -> dict[str, int]:
    """Training FLOPs per token (forward + backward = 3x forward), the PaLM paper's appendix B estimate.

    `weights` = 6N with N the block parameters plus the head's D x d (a tied embedding counts once, as the
    head; embedding lookups and position adds cost no matmul).
    `attention` = 6·M·T·H·(D_K + D_V): Q·K^T and A·V over a full T-token context, as PaLM counts it
    (12·L·H·Q·T when D_K = D_V); causal masking could halve it, which kernels rarely realise.
    The post-GPT-3 toggles enter through the parameter counts (a gated MLP's doubled first layer, QK-norm and
    RMSNorm gains); RoPE's rotation, ALiBi's bias, the gate product and soft-capping are elementwise, O(T·D)
    per layer, and left out as PaLM leaves out norms and softmax. The speedrun's value and bigram embeddings are
    lookups (no matmul), its scalars count as weights, and a block without attention has no attention term.
    """
    counts = count_parameters(cfg)
    blocks = counts["attention"] + counts["mlp"] + counts["norm"] + counts["scalars"]
    matmul_params = blocks + cfg.n_embd * cfg.padded_vocab_size  # plus the head, tied or not
    weights = 6 * matmul_params
    attn_layers = cfg.n_layer - len(cfg.no_attn_layers)
    attention = 6 * attn_layers * cfg.block_size * cfg.n_head * (cfg.head_dim + cfg.v_head_dim)
    return {"weights": weights, "attention": attention, "total": weights + attention}


def parameter_table(cfg: GPTConfig, name: str = "model") -> str:
    """Seed 003's table for one model: each component, its share of the total, then training FLOPs per token."""
    counts, flops = count_parameters(cfg), training_flops_per_token(cfg)
    total = counts["total"]
    shape = (
        f"d={cfg.padded_vocab_size} T={cfg.block_size} D={cfg.n_embd} H={cfg.n_head} D_K={cfg.head_dim} "
        f"D_V={cfg.v_head_dim} M={cfg.n_layer} d_ff={cfg.d_ff}"
    )
    width = max(len(f"{total:,}"), len(f"{flops['total']:,}"), len("parameters"))
    lines = [f"{name} ({shape})", f"{'component':<12}{'parameters':>{width}}{'share':>9}"]
    for key in COMPONENTS:
        lines.append(f"{key:<12}{counts[key]:>{width},}{counts[key] / total:>9.1%}")
    lines.append(f"{'total':<12}{total:>{width},}{1:>9.1%}")
    lines.append("")
    lines.append(f"training FLOPs per token (PaLM app. B, T={cfg.block_size}):")
    lines.append(f"{'6N':<12}{flops['weights']:>{width},}")
    lines.append(f"{'attention':<12}{flops['attention']:>{width},}")
    lines.append(f"{'total':<12}{flops['total']:>{width},}")
    return "\n".join(lines)
