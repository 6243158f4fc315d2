"""model.parametrization=mup (Tensor Programs V for Adam): the init per layer kind at two widths, the per-layer lrs
in the optimizer's groups (also through a real run and its resume), the 1/D_K score scale and 1/r logit factor
against a hand-computed forward pass, equality with the standard model at r = 1, every toggle training a step,
the HF export reproducing the logits in transformers, the coordinate check's slopes, and bad values refused."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import compose_config, compose_tiny, load_checkpoint, scalars, train_in_process

from gptlab.config.rules import check_rules
from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig
from gptlab.preflight.early_checks import check_config
from gptlab.report.mup_transfer import WidthCurve, grid_steps, transfer_table, transfer_verdicts
from gptlab.tools.coord_check import CoordSetup, coord_check, slopes
from gptlab.train.optim import adamw, param_groups, scale_group_lrs

HIDDEN = ("attn.qkv", "attn.out", "mlp.layers.0", "mlp.layers.2")


def model(seed: int = 0, **kw: object) -> GPT:
    torch.manual_seed(seed)
    values = dict(vocab_size=61, block_size=16, n_layer=2, n_head=2, n_embd=64, parametrization="mup",
                  mup_base_width=16)
    return GPT(GPTConfig(**{**values, **kw}))


@pytest.mark.parametrize("width", [128, 512])
def test_init_std_per_layer_kind_follows_mup_at_two_widths(width: int) -> None:
    m = model(n_embd=width, mup_base_width=128, n_layer=3, tie_weights=False, vocab_size=512, block_size=256)
    r, M = width / 128, 3
    expected = {"tok_emb.weight": 0.02, "pos_emb.weight": 0.02, "head.weight": 0.02}  # width-independent
    for i in range(M):
        expected |= {f"blocks.{i}.attn.qkv.weight": 0.02 / math.sqrt(r),
                     f"blocks.{i}.mlp.layers.0.weight": 0.02 / math.sqrt(r),
                     f"blocks.{i}.attn.out.weight": 0.02 / math.sqrt(2 * M) / math.sqrt(r),  # residual writes
                     f"blocks.{i}.mlp.layers.2.weight": 0.02 / math.sqrt(2 * M) / math.sqrt(r)}
    params = dict(m.named_parameters())
    for name, std in expected.items():
        assert params[name].std().item() == pytest.approx(std, rel=0.02), name
        assert abs(params[name].mean().item()) < 0.1 * std, name
    for name, p in params.items():
        if name.endswith(".bias"):
            assert torch.all(p == 0), name
        elif "norm" in name:
            assert torch.all(p == 1), name
    assert set(expected) | {n for n in params if n.endswith(".bias") or "norm" in n} == set(params)


def test_hidden_matrices_get_lr_over_r_and_everything_else_the_base_lr() -> None:
    for tie in (True, False):
        m = model(tie_weights=tie)  # r = 64 / 16 = 4
        opt = adamw(param_groups(adamw, m, 0.1), lr=1e-3)
        scale_group_lrs(opt)
        lrs = {name: g["lr"] for g in opt.param_groups for p in g["params"]
               for name, q in m.named_parameters() if q is p}
        hidden = {f"blocks.{i}.{h}.weight" for i in range(2) for h in HIDDEN}
        assert {n for n, lr in lrs.items() if lr == pytest.approx(1e-3 / 4)} == hidden
        assert all(lr == 1e-3 for n, lr in lrs.items() if n not in hidden)  # embeddings, head, gains, biases
        assert ("head.weight" in lrs) != tie and len(lrs) == len(dict(m.named_parameters()))
        decay = {n for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]
                 for n, q in m.named_parameters() if q is p}
        assert decay == {n for n, p in m.named_parameters() if p.dim() >= 2}  # weight decay rule unchanged


def test_scores_are_scaled_by_one_over_d_and_logits_by_one_over_r_by_hand() -> None:
    for attn_scale in (None, 0.5):
        m = model(n_layer=1, attn_scale=attn_scale).eval()  # n_embd 64, base 16: r = 4; head_dim 32, base 8
        with torch.no_grad():
            for p in m.parameters():  # move off the init, so every term counts
                p.add_(0.05 * torch.randn_like(p))
        idx = torch.randint(0, 61, (2, 16))
        scale = math.sqrt(8) / 32 if attn_scale is None else 0.5 / 4  # muP: sqrt(D_K,base)/D_K; attn_scale/r
        torch.testing.assert_close(m(idx), hand_forward(m, idx, scale, 1 / 4), atol=1e-5, rtol=1e-5)


def hand_forward(m: GPT, idx: torch.Tensor, scale: float, output_mult: float) -> torch.Tensor:
    """Eq. 2, 5, 9, 10 of docs/model.md for a 1-block pre-LN GPT with learned positions and a tied head."""
    P = dict(m.named_parameters())
    b, T = idx.shape

    def ln(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (64,), P[f"{name}.weight"], P[f"{name}.bias"], 1e-5)

    x = P["tok_emb.weight"][idx] + P["pos_emb.weight"][:T]
    qkv = F.linear(ln(x, "blocks.0.norm_1"), P["blocks.0.attn.qkv.weight"], P["blocks.0.attn.qkv.bias"])
    q, k, v = qkv.chunk(3, -1)
    q, k, v = (t.view(b, T, 2, 32).transpose(1, 2) for t in (q, k, v))
    mask = torch.full((T, T), float("-inf")).triu(1)
    y = torch.softmax(q @ k.transpose(-1, -2) * scale + mask, -1) @ v
    x = x + F.linear(y.transpose(1, 2).reshape(b, T, 64), P["blocks.0.attn.out.weight"], P["blocks.0.attn.out.bias"])
    h = F.gelu(F.linear(ln(x, "blocks.0.norm_2"), P["blocks.0.mlp.layers.0.weight"], P["blocks.0.mlp.layers.0.bias"]),
               approximate="tanh")
    x = x + F.linear(h, P["blocks.0.mlp.layers.2.weight"], P["blocks.0.mlp.layers.2.bias"])
    return ln(x, "final_norm") @ P["tok_emb.weight"].T * output_mult


def test_mup_at_its_base_width_is_the_standard_model() -> None:
    """r = 1: the same weights from the same seed (bit for bit), the same logits, the same param groups and lrs."""
    for kw in ({}, {"tie_weights": False, "pos_emb": "rope", "norm_type": "rmsnorm", "attn_scale": 0.3}):
        mup, std = model(mup_base_width=64, **kw), model(parametrization="standard", **kw)
        assert all(torch.equal(a, b) for a, b in zip(mup.state_dict().values(), std.state_dict().values()))
        idx = torch.randint(0, 61, (2, 16))
        assert torch.equal(mup(idx), std(idx))
        groups = [param_groups(adamw, m, 0.1) for m in (mup, std)]
        assert [(g["name"], len(g["params"]), g.get("lr_mult")) for g in groups[0]] == \
               [(g["name"], len(g["params"]), None) for g in groups[1]]


TOGGLES = [{"norm": "post"}, {"norm_type": "rmsnorm"}, {"tie_weights": False}, {"qk_norm": True},
           {"logit_softcap": 30.0}, {"attn_pattern": ["dense", "local"], "attn_window": 4},
           {"attn_pattern": ["strided"], "attn_window": 4}, {"attn_bias": False, "mlp_bias": False},
           {"head_dim": 16, "v_head_dim": 8}, {"mlp_layers": 3}, {"n_embd": 40}]  # r = 40 / 16 = 2.5: any ratio
TOGGLES += [{"pos_emb": p} for p in ("learned", "sinusoidal", "none", "rope", "alibi")]
TOGGLES += [{"activation": a} for a in ("gelu_tanh", "gelu", "relu", "swiglu", "geglu")]


@pytest.mark.parametrize("toggle", TOGGLES, ids=lambda t: ",".join(f"{k}={v}" for k, v in t.items()))
def test_every_toggle_builds_and_trains_a_step_under_mup(toggle: dict) -> None:
    m = model(**toggle)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    opt = adamw(param_groups(adamw, m, 0.1), lr=1e-3)
    scale_group_lrs(opt)
    idx = torch.randint(0, 61, (2, 17))
    loss = F.cross_entropy(m(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and loss.item() == pytest.approx(math.log(61), abs=0.5)  # logits / r: near uniform
    moved = {n for n, p in m.named_parameters() if not torch.equal(p, before[n])}
    assert moved == set(before)  # every parameter took its step
    hidden = [g for g in opt.param_groups if g["name"] == "hidden"][0]
    r = m.config.n_embd / 16
    assert hidden["lr"] == pytest.approx(1e-3 / r) and len(hidden["params"]) >= 4 * 2


@pytest.mark.parametrize("tie", [True, False])
def test_hf_export_folds_the_multipliers_so_transformers_reproduces_the_logits(tmp_path: Path, tie: bool) -> None:
    from transformers import AutoModelForCausalLM

    from gptlab.interop.hf import from_pretrained, save_pretrained

    for kw in ({}, {"pos_emb": "rope", "norm_type": "rmsnorm", "activation": "swiglu", "attn_bias": False,
                    "mlp_bias": False}):  # GPT-2 and Llama
        m = model(tie_weights=tie, **kw).eval()
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.05 * torch.randn_like(p))
        out = tmp_path / f"{tie}{len(kw)}"
        save_pretrained(m, out)
        idx = torch.randint(0, 61, (2, 16))
        with torch.no_grad():
            ours, theirs = m(idx), AutoModelForCausalLM.from_pretrained(out).eval()(idx).logits
            reloaded = from_pretrained(out)
            back = reloaded(idx)
        torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(back, ours, atol=1e-5, rtol=1e-5)
        config = json.loads((out / "config.json").read_text())
        assert config["tie_word_embeddings"] is False  # a tied head carries 1/r only untied: E_1 stays as trained
        assert "parametrization" not in config and reloaded.config.parametrization == "standard"


def test_bad_values_are_refused_by_name(tmp_path: Path) -> None:
    for bad in (0, -64, 1.5, "wide"):
        with pytest.raises(ConfigError, match=rf"model\.mup_base_width={bad!r} must be a positive integer"):
            model(mup_base_width=bad)
    for name in ("sgd", "adafactor", "muon"):
        with pytest.raises(ConfigError, match=f"model.parametrization=mup cannot train with optimizer={name}"):
            check_rules(compose_config(["model.parametrization=mup", f"optimizer={name}"], tmp_path))
    check_rules(compose_config(["model.parametrization=mup", "optimizer=adamw"], tmp_path))
    with pytest.raises(ConfigError, match=r"model\.mup_base_width=64 has no effect.*model\.parametrization=mup"):
        check_config(compose_tiny(tmp_path / "run", "model.mup_base_width=64"))  # a base width without mup
    with pytest.raises(ConfigError, match=r"optimizer=sgd \(torch.optim.sgd.SGD\).*optimizer=adamw"):
        param_groups(torch.optim.SGD, model(), 0.0)  # the same refusal without Hydra, from the param groups


def test_a_mup_run_with_muon_stops_before_training_with_the_fix(tmp_path: Path) -> None:
    """The launch's early checks (before any run dir or model exists) hold the rule."""
    with pytest.raises(ConfigError, match="optimizer=muon.*Use optimizer=adamw, or model.parametrization=standard"):
        check_config(compose_tiny(tmp_path / "run", "model.parametrization=mup", "optimizer=muon"))
    assert not (tmp_path / "run").exists()


MUP_RUN = ["model.parametrization=mup", "model.n_embd=64", "model.mup_base_width=32", "trainer.val_check_interval=3"]


def test_a_run_keeps_the_hidden_lr_at_one_over_r_through_its_schedule_and_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train_in_process(run, *MUP_RUN, "trainer.max_steps=3")
    first = load_checkpoint(run / "checkpoints" / "last.ckpt")
    train_in_process(run, *MUP_RUN, "trainer.max_steps=6", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    warmup = lambda step: 4e-3 * (step + 1) / 20  # noqa: E731  cosine's 20 warmup steps at the nano lr 4e-3
    for steps, state in ((3, first), (6, load_checkpoint(run / "checkpoints" / "last.ckpt"))):
        groups = {g["name"]: g for g in state["optimizer_states"][0]["param_groups"]}
        assert set(groups) == {"hidden", "decay", "no_decay"} and groups["hidden"]["lr_mult"] == 0.5
        assert groups["decay"]["lr"] == pytest.approx(warmup(steps)) == groups["no_decay"]["lr"]
        assert groups["hidden"]["lr"] == pytest.approx(warmup(steps) / 2)  # r = 2, not doubled by the resume
        assert state["hyper_parameters"]["model"]["parametrization"] == "mup"
    logged = sorted(scalars(run)["train/lr"].values())  # the schedule's lr, not the hidden group's lr / r
    assert logged == pytest.approx([warmup(step) for step in range(6)])


def test_coordinate_check_is_flat_under_mup_and_grows_under_standard() -> None:
    setup = CoordSetup(widths=(64, 128, 256), base_width=64, steps=3, lr=3e-3, seeds=(0,), batch_size=4,
                       block_size=16)  # ~3 s of CPU; scripts/coord_check.py runs 64..1024 with 2 seeds
    fitted = {name: slopes(setup.widths, coord_check(setup, name)) for name in ("standard", "mup")}
    layers = {"embedding", "logits"} | {f"block{i}.{part}" for i, part in itertools.product(range(2), ("attn", "mlp"))}
    assert set(fitted["mup"]) == set(fitted["standard"]) == layers
    assert all(abs(s) < 0.3 for s in fitted["mup"].values()), fitted["mup"]
    assert all(fitted["standard"][layer] > 0.5 for layer in layers - {"embedding"}), fitted["standard"]
    assert abs(fitted["standard"]["embedding"]) < 0.1  # embeddings are width-independent in both


def test_transfer_report_counts_grid_steps_from_the_narrowest_best_lr() -> None:
    grid = [1e-3, 2e-3, 4e-3, 8e-3]
    curve = lambda best: {lr: 3.0 + abs(i - best) * 0.1 for i, lr in enumerate(grid)}  # noqa: E731
    curves = [WidthCurve("mup", 64, curve(2)), WidthCurve("mup", 256, curve(2)), WidthCurve("mup", 512, curve(1)),
              WidthCurve("standard", 64, curve(2)), WidthCurve("standard", 256, curve(1)),
              WidthCurve("standard", 512, curve(0))]
    assert grid_steps(curves) == {("mup", 64): 0, ("mup", 256): 0, ("mup", 512): -1, ("standard", 64): 0,
                                  ("standard", 256): -1, ("standard", 512): -2}
    assert transfer_verdicts(curves) == [
        "mup: best LR 0.004 at 64, 0.004 at 256, 0.002 at 512: transfers (within one grid step)",
        "standard: best LR 0.004 at 64, 0.002 at 256, 0.001 at 512: drifts (2 grid steps)"]
    row = transfer_table(curves).splitlines()[-1]
    assert row == "| standard | 512 | **3.0000** | 3.1000 | 3.2000 | 3.3000 | 0.001 | -2 |"
