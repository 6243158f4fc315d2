"""The model against docs/model.md: causality, the formulas written out by hand, shapes and counts."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from gptlab.model import GPT, GPTConfig

SMALL = dict(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=16)


@pytest.mark.parametrize(
    "norm,pos_emb,tie", list(itertools.product(["pre", "post"], ["learned", "sinusoidal", "none"], [True, False]))
)
def test_future_tokens_do_not_change_past_logits(norm: str, pos_emb: str, tie: bool) -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SMALL, norm=norm, pos_emb=pos_emb, tie_weights=tie)).eval()
    idx = torch.randint(0, 37, (2, 16))
    t = 6
    changed = idx.clone()
    changed[:, t + 1 :] = torch.randint(0, 37, (2, 16 - t - 1))
    assert not torch.equal(changed, idx)
    with torch.no_grad():
        a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-6)
    assert (a[:, t + 1 :] - b[:, t + 1 :]).abs().max() > 1e-4  # the future does reach later positions


def _reference_forward(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """docs/model.md written out for one layer, reading the weights but none of the model's code."""
    cfg = model.config
    H, dk, dv, T = cfg.n_head, cfg.head_dim, cfg.v_head_dim, idx.shape[1]
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[:T]  # Enc+(X) = X E_1 + P E_2 (eq. 2)

    def norm(z, ln):
        mu, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
        return (z - mu) / torch.sqrt(var + cfg.layer_norm_eps) * ln.weight + ln.bias

    block = model.blocks[0]
    W, b = block.attn.qkv.weight.T, block.attn.qkv.bias
    Wq, Wk, Wv = W[:, : H * dk], W[:, H * dk : 2 * H * dk], W[:, 2 * H * dk :]
    bq, bk, bv = b[: H * dk], b[H * dk : 2 * H * dk], b[2 * H * dk :]
    mask = torch.full((T, T), float("-inf")).triu(1)  # M_ij = -inf for j > i

    def att(z):  # eq. 5 without the residual
        heads = []
        for h in range(H):
            q = z @ Wq[:, h * dk : (h + 1) * dk] + bq[h * dk : (h + 1) * dk]
            k = z @ Wk[:, h * dk : (h + 1) * dk] + bk[h * dk : (h + 1) * dk]
            v = z @ Wv[:, h * dv : (h + 1) * dv] + bv[h * dv : (h + 1) * dv]
            heads.append(torch.softmax((q @ k.transpose(-1, -2) + mask) / math.sqrt(dk), dim=-1) @ v)
        return torch.cat(heads, dim=-1) @ block.attn.out.weight.T + block.attn.out.bias

    def gelu_tanh(u):  # eq. 8
        return 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))

    f1, f2 = block.mlp.layers[0], block.mlp.layers[2]

    def mlp(z):
        return gelu_tanh(z @ f1.weight.T + f1.bias) @ f2.weight.T + f2.bias

    if cfg.norm == "pre":  # eq. 9, then the final norm of eq. 10
        x = x + att(norm(x, block.norm_1))
        x = x + mlp(norm(x, block.norm_2))
        x = norm(x, model.final_norm)
    else:  # post-LN, no final norm
        x = norm(x + att(x), block.norm_1)
        x = norm(x + mlp(x), block.norm_2)
    return x @ model.tok_emb.weight.T  # tied head: W_head = E_1^T


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_one_layer_matches_the_formulas(norm: str) -> None:
    torch.manual_seed(1)
    cfg = GPTConfig(vocab_size=50, block_size=12, n_layer=1, n_head=3, n_embd=24, head_dim=5, v_head_dim=7, norm=norm)
    model = GPT(cfg).eval()
    with torch.no_grad():  # non-zero biases and norms so every term is exercised
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    idx = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), _reference_forward(model, idx), rtol=0, atol=1e-5)


def test_decoupled_head_dims_run_and_count() -> None:
    cfg = GPTConfig(vocab_size=60, block_size=8, n_layer=2, n_head=3, n_embd=48, head_dim=32, v_head_dim=8)
    model = GPT(cfg)
    assert model(torch.randint(0, 60, (1, 8))).shape == (1, 8, 60)
    D, H, dk, dv, dff = 48, 3, 32, 8, 4 * 48
    attn = D * H * (2 * dk + dv) + H * (2 * dk + dv) + H * dv * D + D
    mlp = D * dff + dff + dff * D + D
    per_block = attn + mlp + 2 * 2 * D
    expected = 60 * D + 8 * D + 2 * per_block + 2 * D  # tied head adds nothing
    assert model.num_parameters() == expected


def test_gpt2_small_has_huggingface_parameter_count() -> None:
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768))
    assert model.num_parameters() == 124_439_808


def test_tied_head_shares_storage_and_untied_does_not() -> None:
    tied = GPT(GPTConfig(**SMALL, tie_weights=True))
    assert tied.head.weight.data_ptr() == tied.tok_emb.weight.data_ptr()
    untied = GPT(GPTConfig(**SMALL, tie_weights=False))
    assert untied.head.weight.data_ptr() != untied.tok_emb.weight.data_ptr()
    assert untied.num_parameters() == tied.num_parameters() + 37 * 16


def test_init_scales_residual_projections() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=100, block_size=8, n_layer=8, n_head=4, n_embd=256))
    assert model.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.blocks[0].attn.out.weight.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.05)
    assert model.blocks[0].mlp.layers[-1].weight.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.05)


@pytest.mark.parametrize("mlp_layers,activation", [(1, "relu"), (3, "gelu"), (2, "relu")])
def test_mlp_depth_and_activation(mlp_layers: int, activation: str) -> None:
    cfg = GPTConfig(**SMALL, mlp_layers=mlp_layers, activation=activation, d_ff=24)
    mlp = GPT(cfg).blocks[0].mlp
    linears = [m for m in mlp.layers if isinstance(m, torch.nn.Linear)]
    assert len(linears) == mlp_layers
    x = torch.randn(3, 16)
    y = x
    for i, lin in enumerate(linears):
        if i > 0:
            y = F.relu(y) if activation == "relu" else F.gelu(y)
        y = lin(y)
    torch.testing.assert_close(mlp(x), y)


def test_label_smoothing_is_soft_target_cross_entropy() -> None:
    from gptlab.model import next_token_loss

    logits, targets, eps = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5)), 0.1
    logp = torch.log_softmax(logits, -1)
    soft = torch.full_like(logp, eps / 11).scatter_add(-1, targets[..., None], torch.full((2, 5, 1), 1 - eps))
    torch.testing.assert_close(next_token_loss(logits, targets, eps), -(soft * logp).sum(-1).mean())


def test_too_long_sequence_is_refused() -> None:
    model = GPT(GPTConfig(**SMALL))
    with pytest.raises(ValueError, match="block_size=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
