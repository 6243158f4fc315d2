"""Parameter and compute accounting from a GPTConfig alone: GPT-3 175B is counted without allocating it.

The formulas mirror the modules one-to-one (docs/model.md; [S3]'s table in docs/presets.md); tests check them against
`sum(p.numel())` of built models, so a change to the modules that is not reflected here fails.
"""

from __future__ import annotations

from gptlab.model.config import GPTConfig
from gptlab.model.norms import norm_parameters
from gptlab.model.positions import POSITIONS

COMPONENTS = ("embedding", "position", "attention", "mlp", "norm", "head")


def _linear(fan_in: int, fan_out: int, bias: bool) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def count_parameters(cfg: GPTConfig) -> dict[str, int]:
    """Parameters per component and their `total`; a tied head adds nothing ([S3])."""
    d, D, M = cfg.padded_vocab_size, cfg.n_embd, cfg.n_layer
    qk_width, v_width = cfg.n_head * cfg.head_dim, cfg.n_head * cfg.v_head_dim
    attention = _linear(D, 2 * qk_width + v_width, cfg.qkv_bias) + _linear(v_width, D, cfg.attn_bias)
    attention += 2 * norm_parameters(cfg.norm_type, cfg.head_dim) if cfg.qk_norm else 0  # q_norm and k_norm gains
    widths = [D] + [cfg.d_ff] * (cfg.mlp_layers - 1) + [D]
    gate = 2 if cfg.gated else 1  # a gated activation's input is [A ‖ B]: layers feeding one are twice as wide
    mlp = sum(_linear(a, b * (gate if i < len(widths) - 2 else 1), cfg.mlp_bias)
              for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])))
    layer_norm = norm_parameters(cfg.norm_type, D)  # gamma and beta (LayerNorm), gamma alone (RMSNorm)
    counts = {
        "embedding": d * D,
        "position": POSITIONS[cfg.pos_emb].parameters(cfg.block_size, D),
        "attention": M * attention,
        "mlp": M * mlp,
        "norm": (2 * M + (1 if cfg.final_norm else 0)) * layer_norm,
        "head": 0 if cfg.tie_weights else D * d,
    }
    counts["total"] = sum(counts.values())
    return counts


def padding_parameters(cfg: GPTConfig) -> int:
    """Parameters in the rows model.pad_vocab_to adds (the embedding's, and an untied head's): tensor size, not model.
    They never enter the loss, sampling or an export, so what a run reports as its parameters leaves them out."""
    return (cfg.padded_vocab_size - cfg.vocab_size) * cfg.n_embd * (1 if cfg.tie_weights else 2)


def training_flops_per_token(cfg: GPTConfig) -> dict[str, int]:
    """Training FLOPs per token (forward + backward = 3x forward), the PaLM paper's appendix B estimate.

    `weights` = 6N with N the block parameters plus the head's D x d (a tied embedding counts once, as the
    head; embedding lookups and position adds cost no matmul).
    `attention` = 6·M·T·H·(D_K + D_V): Q·K^T and A·V over a full T-token context, as PaLM counts it
    (12·L·H·Q·T when D_K = D_V); causal masking could halve it, which kernels rarely realise.
    The post-GPT-3 toggles enter through the parameter counts (a gated MLP's doubled first layer, QK-norm and
    RMSNorm gains); RoPE's rotation, ALiBi's bias, the gate product and soft-capping are elementwise, O(T·D)
    per layer, and left out as PaLM leaves out norms and softmax.
    """
    counts = count_parameters(cfg)
    blocks = counts["attention"] + counts["mlp"] + counts["norm"]
    matmul_params = blocks + cfg.n_embd * cfg.padded_vocab_size  # plus the head, tied or not
    weights = 6 * matmul_params
    attention = 6 * cfg.n_layer * cfg.block_size * cfg.n_head * (cfg.head_dim + cfg.v_head_dim)
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
