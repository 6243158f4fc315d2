"""optimizer=normuon: NorMuon's step against a hand-written reference of its formula, the speedrun split's parameter
groups (hidden matrices / embeddings / head / scalars, each with its own lr), and its refusals. In process, tiny."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import compose_config
from hydra.utils import instantiate

from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig
from gptlab.preflight.early_checks import check_config
from gptlab.train.normuon import NorMuonAdam, speedrun_groups
from gptlab.train.optim import param_groups


def reference_orthogonalize(m: torch.Tensor) -> torch.Tensor:
    """Quintic Newton–Schulz, written out: X0 = M/||M||_F on the wide side, X <- aX + (bS + cS²)X, S = XXᵀ, 5 times."""
    a, b, c = 3.4445, -4.775, 2.0315
    x = m.T if m.shape[0] > m.shape[1] else m
    x = x / x.norm()
    for _ in range(5):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x.T if m.shape[0] > m.shape[1] else x


def reference_normuon(o: torch.Tensor, v: torch.Tensor, beta2: float) -> tuple[torch.Tensor, torch.Tensor]:
    """NorMuon's normalization neuron by neuron: a row's (rows >= cols) or a column's mean square, its EMA, the
    division, then the whole matrix rescaled to O's Frobenius norm."""
    rows, cols = o.shape
    out, v = o.clone(), v.clone()
    if rows >= cols:
        for i in range(rows):
            v[i, 0] = beta2 * v[i, 0] + (1 - beta2) * sum(float(o[i, j]) ** 2 for j in range(cols)) / cols
            out[i] = o[i] / v[i, 0].sqrt()
    else:
        for j in range(cols):
            v[0, j] = beta2 * v[0, j] + (1 - beta2) * sum(float(o[i, j]) ** 2 for i in range(rows)) / rows
            out[:, j] = o[:, j] / v[0, j].sqrt()
    return out * (o.norm() / out.norm()), v


@pytest.mark.parametrize("shape", [(3, 5), (6, 4)])  # wide (one statistic per column), tall (per row)
def test_normuon_step_is_the_hand_computed_step(shape: tuple[int, int]) -> None:
    torch.manual_seed(0)
    w, bias = torch.nn.Parameter(torch.randn(*shape)), torch.nn.Parameter(torch.randn(shape[0]))
    groups = [{"params": [w], "part": "hidden"}, {"params": [], "part": "embed"}, {"params": [], "part": "head"},
              {"params": [bias], "part": "scalars"}]
    lr, wd, mu, beta2 = 0.05, 0.1, 0.9, 0.8
    opt = NorMuonAdam(groups, lr=lr, embed_lr=0.3, head_lr=0.2, scalar_lr=0.1, weight_decay=wd, momentum=mu,
                      beta2=beta2)
    buf, v = torch.zeros(shape), torch.zeros((shape[0], 1) if shape[0] >= shape[1] else (1, shape[1]))
    expected = w.detach().clone()
    for _ in range(3):  # later steps read the momentum and the neurons' EMA of the earlier ones
        grad = torch.randn(shape)
        w.grad, bias.grad = grad.clone(), torch.randn(shape[0])
        opt.step()
        buf = mu * buf + (1 - mu) * grad
        o, v = reference_normuon(reference_orthogonalize(grad + mu * (buf - grad)), v, beta2)
        expected = expected * (1 - lr * wd) - lr * max(1.0, shape[0] / shape[1]) ** 0.5 * o
        torch.testing.assert_close(w.detach(), expected, atol=1e-4, rtol=0)
    assert opt.adam.state[bias]["step"] == 3 and bias not in opt.normuon.state  # the bias: Adam's
    assert [g["lr"] for g in opt.param_groups] == [lr, 0.3, 0.2, 0.1]  # hidden, embed, head, scalars


def tiny_model(**kw: object) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=30, block_size=8, n_layer=2, n_head=2, n_embd=16, **kw))


@pytest.mark.parametrize("tie", [True, False])
def test_the_split_puts_each_parameter_in_its_part_with_its_own_lr(tie: bool) -> None:
    model = tiny_model(tie_weights=tie)
    factory = instantiate(compose_config(["optimizer=normuon"], "/tmp/unused").optimizer)
    groups = param_groups(factory, model, 0.0)
    assert groups == speedrun_groups(model, 0.0)
    named = {id(p): n for n, p in model.named_parameters()}  # a tied head is named once, as the embedding
    parts = {g["part"]: {named[id(p)] for p in g["params"]} for g in groups}
    assert parts["hidden"] == {f"blocks.{i}.{m}.weight" for i in range(2)
                               for m in ("attn.qkv", "attn.out", "mlp.layers.0", "mlp.layers.2")}
    assert parts["head"] == {"tok_emb.weight" if tie else "head.weight"}  # tied: trained as the head
    assert parts["embed"] == ({"pos_emb.weight"} if tie else {"tok_emb.weight", "pos_emb.weight"})
    assert parts["scalars"] and all(named_p.endswith(("bias", "weight")) for named_p in parts["scalars"])
    assert all(p.dim() == 1 for g in groups if g["part"] == "scalars" for p in g["params"])
    assert sum(p.numel() for g in groups for p in g["params"]) == model.num_parameters()
    opt = factory(groups)
    assert {g["part"]: g["lr"] for g in opt.param_groups} == {"hidden": 0.06, "embed": 0.6, "head": 0.008,
                                                               "scalars": 0.04}
    assert {g["part"]: g["weight_decay"] for g in opt.param_groups} == dict.fromkeys(parts, 0.0)
    assert opt.adam.defaults["betas"] == (0.65, 0.95)


def test_other_groups_a_foreign_state_and_fsdp_are_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="speedrun_groups"):
        NorMuonAdam([torch.nn.Parameter(torch.zeros(2, 2))], lr=1e-3, embed_lr=1, head_lr=1, scalar_lr=1)
    opt = NorMuonAdam(speedrun_groups(tiny_model(), 0.0), lr=1e-3, embed_lr=1, head_lr=1, scalar_lr=1)
    with pytest.raises(ConfigError, match="not optimizer=normuon's"):
        opt.load_state_dict({"muon": {}, "adamw": {}})
    with pytest.raises(ConfigError, match="optimizer=normuon cannot run under trainer=fsdp.*trainer=ddp"):
        check_config(compose_config(["optimizer=normuon", "trainer=fsdp"], tmp_path))
    with pytest.raises(ConfigError, match="parametrization=mup cannot train with optimizer=normuon"):
        check_config(compose_config(["optimizer=normuon", "model.parametrization=mup"], tmp_path))
