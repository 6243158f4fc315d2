"""The post-GPT-3 toggles against their papers' formulas, written out by hand (RoPE, ALiBi, RMSNorm, SwiGLU/GeGLU,
QK-norm, soft-capped logits, z-loss), and KV-cached decoding equal to full recompute with each of them."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig, count_parameters
from gptlab.model.alibi import alibi_slopes
from gptlab.model.config import default_d_ff
from gptlab.model.loss import z_loss_term

SMALL = dict(vocab_size=37, block_size=24, n_layer=1, n_head=2, n_embd=16)


def _norm(z: torch.Tensor, module: torch.nn.Module, cfg: GPTConfig) -> torch.Tensor:
    if cfg.norm_type == "rmsnorm":  # Zhang & Sennrich 2019, eq. 4: a_i / RMS(a) * g_i, no mean, no bias
        return z / torch.sqrt(z.pow(2).mean(-1, keepdim=True) + cfg.layer_norm_eps) * module.weight
    mu, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
    return (z - mu) / torch.sqrt(var + cfg.layer_norm_eps) * module.weight + module.bias


def _rope(x: torch.Tensor, cfg: GPTConfig) -> torch.Tensor:
    """RoFormer §3.2 in its complex form: the pair (x_i, x_{i+R/2}) is the number x_i + i x_{i+R/2}, multiplied
    by e^{i m θ_i} at position m, θ_i = theta^(-2i/R)."""
    R, out = cfg.rotary_dim, x.clone()
    for m in range(x.shape[0]):
        for i in range(R // 2):
            z = complex(x[m, i], x[m, i + R // 2]) * complex(math.cos(m * cfg.rope_theta ** (-2 * i / R)),
                                                            math.sin(m * cfg.rope_theta ** (-2 * i / R)))
            out[m, i], out[m, i + R // 2] = z.real, z.imag
    return out


def _reference(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """One block, one sequence, position by position from the formulas; reads the weights, none of the code."""
    cfg, block = model.config, model.blocks[0]
    H, dk, T = cfg.n_head, cfg.head_dim, idx.shape[0]
    x = model.tok_emb.weight[idx]  # RoPE and ALiBi add nothing to the embedding
    W = block.attn.qkv.weight.T
    slopes = [2.0 ** (-8 * (h + 1) / H) for h in range(H)]  # Press et al. §3, H a power of two

    def att(z: torch.Tensor) -> torch.Tensor:
        heads = []
        for h in range(H):
            q, k = z @ W[:, h * dk : (h + 1) * dk], z @ W[:, (H + h) * dk : (H + h + 1) * dk]
            v = z @ W[:, (2 * H + h) * dk : (2 * H + h + 1) * dk]
            if cfg.qk_norm:
                q, k = _norm(q, block.attn.q_norm, cfg), _norm(k, block.attn.k_norm, cfg)
            if cfg.pos_emb == "rope":
                q, k = _rope(q, cfg), _rope(k, cfg)
            scores = q @ k.T / math.sqrt(dk)
            i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
            if cfg.pos_emb == "alibi":
                scores = scores - slopes[h] * (i - j)
            heads.append(torch.softmax(scores.masked_fill(j > i, float("-inf")), dim=-1) @ v)
        return torch.cat(heads, dim=-1) @ block.attn.out.weight.T

    f1, f2 = block.mlp.layers[0].weight.T, block.mlp.layers[2].weight.T
    gate, value = f1[:, : cfg.d_ff], f1[:, cfg.d_ff :]

    def mlp(z: torch.Tensor) -> torch.Tensor:  # Shazeer 2020: FFN_SwiGLU = (Swish_1(xW) ⊗ xV) W_2
        a = z @ gate
        act = a * torch.sigmoid(a) if cfg.activation == "swiglu" else 0.5 * a * (1 + torch.erf(a / math.sqrt(2)))
        return (act * (z @ value)) @ f2

    if cfg.norm == "pre":
        x = x + att(_norm(x, block.norm_1, cfg))
        x = _norm(x + mlp(_norm(x, block.norm_2, cfg)), model.final_norm, cfg)
    else:
        x = _norm(x + att(x), block.norm_1, cfg)
        x = _norm(x + mlp(x), block.norm_2, cfg)
    logits = x @ model.head.weight.T
    if cfg.logit_softcap is not None:  # Gemma 2: soft-cap c tanh(logits / c)
        logits = cfg.logit_softcap * torch.tanh(logits / cfg.logit_softcap)
    return logits


CASES = [  # pos_emb, norm, activation, qk_norm, logit_softcap, rope_fraction
    ("rope", "pre", "swiglu", False, None, 1.0),
    ("rope", "pre", "geglu", True, None, 0.5),
    ("alibi", "pre", "swiglu", True, 5.0, 1.0),
    ("alibi", "post", "geglu", False, None, 1.0),
    ("rope", "post", "swiglu", True, 5.0, 1.0),
]


@pytest.mark.parametrize("norm_type", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("pos_emb,norm,activation,qk_norm,cap,fraction", CASES)
def test_one_layer_matches_the_papers_formulas(pos_emb, norm, activation, qk_norm, cap, fraction, norm_type) -> None:
    torch.manual_seed(0)
    cfg = GPTConfig(**SMALL, pos_emb=pos_emb, norm=norm, norm_type=norm_type, activation=activation, qk_norm=qk_norm,
                    logit_softcap=cap, rope_fraction=fraction, attn_bias=False, mlp_bias=False, tie_weights=False,
                    final_norm=norm == "pre")
    model = GPT(cfg).eval()
    with torch.no_grad():  # norms away from their init, so a gain applied wrongly shows
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    idx = torch.randint(0, 37, (20,))
    with torch.no_grad():
        got = model(idx[None])[0]
        want = _reference(model, idx)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_alibi_slopes_are_the_papers() -> None:
    assert alibi_slopes(8) == [1 / 2**k for k in range(1, 9)]  # "1/2^1, 1/2^2, ..., 1/2^8" for 8 heads
    # Not a power of two: the 8 slopes of 8 heads, then every other slope of 16 heads (2^-0.5, 2^-1.5, ...).
    assert alibi_slopes(12) == pytest.approx(alibi_slopes(8) + [2 ** (-(2 * k + 1) / 2) for k in range(4)])


def test_gated_d_ff_default_keeps_the_parameter_count() -> None:
    """3 D d_ff = 8 D^2 (three matrices instead of two), d_ff the multiple of 64 nearest to 8 D / 3."""
    assert default_d_ff(768, "swiglu") == 2048 and default_d_ff(128, "geglu") == 320
    assert default_d_ff(16, "swiglu") == 64
    for D in (128, 256, 768, 1024, 4096):
        gated = count_parameters(GPTConfig(vocab_size=10, n_embd=D, n_head=4, activation="swiglu", mlp_bias=False))
        plain = count_parameters(GPTConfig(vocab_size=10, n_embd=D, n_head=4, mlp_bias=False))
        d_ff = default_d_ff(D, "swiglu")
        assert d_ff % 64 == 0 and gated["mlp"] == 3 * D * d_ff * 4  # 4 layers
        assert abs(gated["mlp"] - plain["mlp"]) <= 3 * D * 32 * 4  # off by at most half a rounding step


def test_z_loss_term_is_mean_log_squared_partition() -> None:
    logits = torch.randn(2, 5, 11) * 3
    z = torch.log(torch.exp(logits.double()).sum(-1))
    torch.testing.assert_close(z_loss_term(logits).double(), (z**2).mean(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("field,value,message", [
    ("norm_type", "batchnorm", "model.norm_type"),
    ("rope_theta", 0, "model.rope_theta"),
    ("rope_fraction", 1.5, "model.rope_fraction"),
    ("qk_norm", "yes", "model.qk_norm"),
    ("z_loss", -1e-4, "model.z_loss"),
    ("logit_softcap", 0.0, "model.logit_softcap"),
    ("activation", "reglu", "model.activation"),
])
def test_bad_values_name_the_field(field: str, value, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GPTConfig(**SMALL, **{field: value})


def test_rope_on_too_narrow_heads_is_refused() -> None:
    with pytest.raises(ConfigError, match="model.rope_fraction"):
        GPTConfig(**SMALL, pos_emb="rope", rope_fraction=0.1)


@pytest.mark.parametrize("pos_emb,pattern,impl", [
    (p, pat, impl) for p, pat, impl in itertools.product(
        ["rope", "alibi"], [["dense", "local"], ["local", "strided"]], ["sdpa", "chunked"])
])
def test_cached_decoding_equals_full_recompute(pos_emb: str, pattern: list, impl: str) -> None:
    """Prompt, then one token at a time, then a chunk: the same logits as recomputing the whole sequence,
    with local layers whose cache keeps only the window (positions must stay absolute)."""
    torch.manual_seed(0)
    cfg = GPTConfig(**{**SMALL, "n_layer": 2, "block_size": 40}, pos_emb=pos_emb, attn_pattern=pattern,
                    attn_window=5, attn_impl=impl, qk_norm=True, norm_type="rmsnorm", activation="swiglu")
    model = GPT(cfg).eval()
    idx = torch.randint(0, 37, (2, 33))
    with torch.no_grad():
        full = model(idx)
        caches = model.new_caches(2, 40)
        parts = [model(idx[:, :9], caches)] + [model(idx[:, t : t + 1], caches) for t in range(9, 20)]
        parts.append(model(idx[:, 20:], caches))
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=2e-5, rtol=1e-4)
    greedy = [model.generate(idx[:, :9], 12, temperature=0, use_cache=c) for c in (True, False)]
    assert torch.equal(*greedy)


@pytest.mark.parametrize("pos_emb", ["rope", "alibi"])
def test_every_kernel_computes_the_same_model(pos_emb: str) -> None:
    """sdpa (the masked reference), chunked, and flex (forward only on CPU: no CPU backward) agree, and
    chunked trains (gradients equal to sdpa's)."""
    x = torch.randint(0, 37, (2, 100))
    outs, grads = {}, {}
    for impl in ("sdpa", "chunked", "flex"):
        torch.manual_seed(1)
        cfg = GPTConfig(**{**SMALL, "n_layer": 2, "block_size": 100, "n_embd": 32}, pos_emb=pos_emb,
                        attn_pattern=["local", "strided"], attn_window=32, attn_impl=impl, qk_norm=True)
        model = GPT(cfg)
        if impl == "flex":
            with torch.no_grad():
                outs[impl] = model(x)
            continue
        outs[impl] = model(x)
        outs[impl].square().mean().backward()
        grads[impl] = model.blocks[0].attn.qkv.weight.grad
        outs[impl] = outs[impl].detach()
    torch.testing.assert_close(outs["chunked"], outs["sdpa"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs["flex"], outs["sdpa"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads["chunked"], grads["sdpa"], atol=1e-5, rtol=1e-4)


def test_default_path_keeps_its_state_dict_keys() -> None:
    """All toggles off: the GPT-2 module tree (issue 14 and checkpoints depend on these names)."""
    keys = set(GPT(GPTConfig(**SMALL)).state_dict())
    assert {"blocks.0.norm_1.bias", "blocks.0.mlp.layers.0.weight", "blocks.0.mlp.layers.2.bias"} <= keys
    assert not any("q_norm" in k or "rotary" in k for k in keys)


@pytest.mark.parametrize("overrides,message", [
    (dict(rope_fraction=0.3), r"model.rope_fraction=0.3 of head_dim n_embd / n_head = 8 is 2.4 dimensions, .*"
                              r"Use model.rope_fraction=0.25 \(2 of 8 dims\) or 0.5 \(4 of 8 dims\)"),
    (dict(head_dim=7), r"model.rope_fraction=1.0 of model.head_dim=7 is 7 dimensions, .*an even model.head_dim "
                       r"\(6 or 8\)"),
])
def test_rope_that_lands_between_pairs_is_refused(overrides, message: str) -> None:
    """0.3 of each head used to rotate 0.25 of it, and a head_dim of 7 rotated 6 of 7, without a word."""
    with pytest.raises(ConfigError, match=message):
        GPTConfig(**{**SMALL, **overrides}, pos_emb="rope")
    assert GPTConfig(**{**SMALL, "rope_fraction": 0.75}, pos_emb="rope").rotary_dim == 6  # exactly what was asked
