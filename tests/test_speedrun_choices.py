"""The speedrun's model-side choices (GPTConfig's last block) against their formulas written out by hand: all off is
the GPT-2 baseline bitwise; each one on, alone and all together, matches a reference that reads the weights and none
of the code (forward and gradients); cached decoding, the init, the multi-token loss and its schedule, the refusals,
the optimizer's groups and the presets' counts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import ROOT, compose_config, scalars, train_in_process
from omegaconf import OmegaConf

from gptlab.errors import ConfigError, PreemptedError
from gptlab.model import GPT, GPTConfig, count_parameters
from gptlab.model.loss import loss_parts
from gptlab.model.mtp import mtp_weights_at
from gptlab.model.smear import bigram_hash
from gptlab.train.muon import muon_groups

SMALL = dict(vocab_size=29, block_size=12, n_layer=4, n_head=2, n_embd=16)
CHOICES = {  # each choice's keys, at the small shape (4 blocks)
    "relu2": dict(activation="relu2"),
    "value_embeds": dict(value_embed_layers=[1, 3]),
    "value_embed_gate": dict(value_embed_layers=[0, 2], value_embed_gate=True),
    "x0_mix": dict(x0_mix=True),
    "skips": dict(skips=[[0, 3], [1, 2]]),
    "residual_scalars": dict(residual_scalars=True),
    "smear": dict(smear=True),
    "sigmoid_cap": dict(logit_sigmoid_cap=[23.0, 5.0, 7.5]),
    "no_attn": dict(no_attn_layers=[2]),
    "no_mlp": dict(no_mlp_layers=[0]),
    "bigram": dict(bigram_vocab=40),
}
ALL = {k: v for choice in CHOICES.values() for k, v in choice.items()} | dict(
    value_embed_layers=[0, 3], value_embed_gate=True, no_attn_layers=[2])


def _perturbed(cfg: GPTConfig) -> GPT:
    """The model with every parameter moved off its start (zeros, gates at 1, scalars at 1 would hide a wrong
    formula), in float64 so that the reference's different order of sums stays within 1e-10."""
    torch.manual_seed(0)
    model = GPT(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def _ln(z: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    mu, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
    return (z - mu) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias


def _reference(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """Logits (T, V) of one sequence from the formulas in conf/model/base.yaml, position by position where a choice
    reads another position; pre-LN, learned positions, tied head, dense attention as GPT-2."""
    cfg = model.config
    T, H, dk, D = idx.shape[0], cfg.n_head, cfg.head_dim, cfg.n_embd
    e = model.tok_emb.weight[idx] + model.pos_emb.weight[:T]
    if cfg.smear:  # e_t += lambda sigmoid(w . e_t[:12]) e_(t-1)
        w, lam = model.smear.gate, model.smear.weight
        e = torch.stack([e[0]] + [e[t] + lam * torch.sigmoid(e[t, : w.numel()] @ w) * e[t - 1] for t in range(1, T)])
    if cfg.bigram_vocab:  # B[(36313 t_t XOR 27191 t_(t-1)) mod ], row R-1 at the first position
        R = cfg.bigram_vocab
        rows = [R - 1] + [((36313 * int(idx[t])) ^ (27191 * int(idx[t - 1]))) % (R - 1) for t in range(1, T)]
        e = e + model.bigram.table.weight[rows]
    x, x0, outs = e, e, {}
    for i, block in enumerate(model.blocks):
        if cfg.x0_mix:
            x = x + model.shortcuts.x0_weights[i] * x0
        for k, (a, b) in enumerate(cfg.skips):
            if b == i:
                x = x + torch.sigmoid(model.shortcuts.skip_gates[k]) * outs[a]
        if i not in cfg.no_attn_layers:
            z = _ln(x, block.norm_1)
            W = block.attn.qkv.weight
            qkv = z @ W.T + block.attn.qkv.bias
            q, k, v = qkv[:, :D], qkv[:, D : 2 * D], qkv[:, 2 * D :]
            if i in cfg.value_embed_layers:
                ve = block.value_embed.table.weight[idx]
                if cfg.value_embed_gate:  # 2 sigmoid(w_h . [x[:6], VE[:6]]) per head
                    g = 2 * torch.sigmoid(torch.cat([z[:, :6], ve[:, :6]], -1) @ block.value_embed.gate.T)
                    ve = (ve.view(T, H, dk) * g[..., None]).reshape(T, D)
                v = v + ve
            heads = []
            for h in range(H):
                s = q[:, h * dk : (h + 1) * dk] @ k[:, h * dk : (h + 1) * dk].T / math.sqrt(dk)
                s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
                heads.append(torch.softmax(s, -1) @ v[:, h * dk : (h + 1) * dk])
            y = torch.cat(heads, -1) @ block.attn.out.weight.T + block.attn.out.bias
            a, c = block.attn_scalars if cfg.residual_scalars else (1.0, 1.0)
            x = a * x + c * y
        if i not in cfg.no_mlp_layers:
            z = _ln(x, block.norm_2)
            f1, f2 = block.mlp.layers[0], block.mlp.layers[2]
            u = z @ f1.weight.T + f1.bias
            act = torch.relu(u) ** 2 if cfg.activation == "relu2" else \
                0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
            y = act @ f2.weight.T + f2.bias
            a, c = block.mlp_scalars if cfg.residual_scalars else (1.0, 1.0)
            x = a * x + c * y
        outs[i] = x
    logits = _ln(x, model.final_norm) @ model.tok_emb.weight.T
    if cfg.logit_sigmoid_cap is not None:  # A sigmoid((z + B) / C)
        A, B, C = cfg.logit_sigmoid_cap
        logits = A * torch.sigmoid((logits + B) / C)
    return logits


@pytest.mark.parametrize("name", [*CHOICES, "all"])
def test_each_choice_matches_its_formula_forward_and_gradients(name: str) -> None:
    cfg = GPTConfig(**SMALL, **(ALL if name == "all" else CHOICES[name]))
    model = _perturbed(cfg)
    idx = torch.randint(0, 29, (2, 12), generator=torch.Generator().manual_seed(1))
    got = model(idx)
    want = torch.stack([_reference(model, row) for row in idx])
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    params = [p for p in model.parameters()]
    g_got = torch.autograd.grad(got.square().sum(), params)
    g_want = torch.autograd.grad(want.square().sum(), params)
    for p_name, a, b in zip([n for n, _ in model.named_parameters()], g_got, g_want):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9, msg=p_name)


def test_all_off_is_the_gpt2_baseline_bitwise() -> None:
    """With every speedrun key at its off value the model is GPT-2's: the same parameters, and logits equal bit for
    bit to eq. 9-11 computed through the baseline's own modules, with nothing of the speedrun's wiring between."""
    torch.manual_seed(0)
    off = dict(zero_init_proj=[], init_scale=None, value_embed_layers=[], value_embed_gate=False, x0_mix=False,
               skips=[], residual_scalars=False, smear=False, logit_sigmoid_cap=None, no_attn_layers=[],
               no_mlp_layers=[], bigram_vocab=0, mtp_weights=[], mtp_weights_end=None)
    model = GPT(GPTConfig(**SMALL, **off))
    torch.manual_seed(0)
    assert torch.equal(torch.cat([p.flatten() for p in GPT(GPTConfig(**SMALL)).parameters()]),
                       torch.cat([p.flatten() for p in model.parameters()]))  # the same init, draw for draw
    names = {n.split(".", 2)[-1] for n, _ in model.named_parameters() if n.startswith("blocks.")}
    assert names == {"norm_1.weight", "norm_1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.out.weight",
                     "attn.out.bias", "norm_2.weight", "norm_2.bias", "mlp.layers.0.weight", "mlp.layers.0.bias",
                     "mlp.layers.2.weight", "mlp.layers.2.bias"}
    assert model.smear is None and model.bigram is None and model.shortcuts is None
    idx = torch.randint(0, 29, (2, 12))
    x = model.tok_emb(idx) + model.pos_emb(0, 12)
    for block in model.blocks:
        x = x + block.attn(block.norm_1(x))
        x = x + block.mlp(block.norm_2(x))
    assert torch.equal(model(idx), model.head(model.final_norm(x)))


def test_cached_decoding_equals_the_full_forward() -> None:
    """The smear and the bigram embedding read the token before the new ones from the cache; beams reorder it."""
    model = _perturbed(GPTConfig(**SMALL, **ALL)).eval()
    idx = torch.randint(0, 29, (2, 12))
    with torch.no_grad():
        full = model(idx)
        caches = model.new_caches(2, 12)
        parts = [model(idx[:, :5], caches)] + [model(idx[:, t : t + 1], caches) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-10, rtol=1e-10)
    with torch.no_grad():  # rows swapped after the prompt: each continues from its own last token
        caches = model.new_caches(2, 12)
        model(idx[:, :5], caches)
        for c in caches:
            c.reorder(torch.tensor([1, 0]))
        step = model(idx.flip(0)[:, 5:6], caches)
    torch.testing.assert_close(step, full.flip(0)[:, 5:6], atol=1e-10, rtol=1e-10)


def test_bigram_hash_reserves_a_row_for_the_first_position() -> None:
    idx = torch.tensor([[3, 7, 7, 0]])
    assert bigram_hash(idx, 11).tolist() == [[10] + [((36313 * b) ^ (27191 * a)) % 10 for a, b in [(3, 7), (7, 7),
                                                                                                   (7, 0)]]]
    assert bigram_hash(idx, 11, before=torch.tensor([[5]]))[0, 0] == ((36313 * 3) ^ (27191 * 5)) % 10


def test_record_init_zeroes_the_named_projections_and_scales_the_rest() -> None:
    cfg = GPTConfig(**{**SMALL, "n_embd": 64}, zero_init_proj=["attn", "mlp"], init_scale=0.5)
    model = GPT(cfg)
    for block in model.blocks:
        assert not block.attn.out.weight.any() and not block.mlp.layers[2].weight.any()
        for w in (block.attn.qkv.weight, block.mlp.layers[0].weight):  # U(+-sqrt(3) 0.5 / sqrt(64))
            bound = math.sqrt(3) * 0.5 / 8
            assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
            assert abs(w.std().item() - 0.5 / 8) < 0.1 * 0.5 / 8
    assert abs(model.tok_emb.weight.std().item() - 0.02) < 0.002  # the embedding keeps GPT-2's
    only_mlp = GPT(GPTConfig(**SMALL, zero_init_proj=["mlp"]))
    assert only_mlp.blocks[0].attn.out.weight.any() and not only_mlp.blocks[0].mlp.layers[2].weight.any()
    starts = GPT(GPTConfig(**SMALL, **ALL))  # gates at 1, scalars at their records' values, tables at 0 / N(0, 0.01)
    assert not starts.smear.gate.any() and not starts.smear.weight.any() and not starts.bigram.table.weight.any()
    assert starts.shortcuts.skip_gates.tolist() == [-1.5, -1.5] and not starts.shortcuts.x0_weights.any()
    assert starts.blocks[0].attn_scalars.tolist() == pytest.approx([math.sqrt(1.1), 1.0])
    assert abs(starts.blocks[0].value_embed.table.weight.std().item() - 0.01) < 0.002


def test_multi_token_loss_and_its_schedule() -> None:
    """objective = CE(next) + sum_k w_k mean_t CE(logits_t, token_(t+1+k)); train/loss (ce) stays the next token's."""
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 6, 9), torch.randint(0, 9, (2, 6))
    w = torch.tensor([0.5, 0.25])
    parts = loss_parts(logits, targets, mtp=w)
    want = F.cross_entropy(logits.reshape(-1, 9), targets.reshape(-1))
    for k, wk in ((1, 0.5), (2, 0.25)):
        terms = [-torch.log_softmax(logits[b, t], -1)[targets[b, t + k]] for b in range(2) for t in range(6 - k)]
        want = want + wk * torch.stack(terms).mean()
    torch.testing.assert_close(parts.objective, want)
    torch.testing.assert_close(parts.ce, F.cross_entropy(logits.reshape(-1, 9), targets.reshape(-1)))
    assert mtp_weights_at([0.5, 0.25], [0.0, 0.0], 0, 100) == [0.5, 0.25]
    assert mtp_weights_at([0.5, 0.25], [0.0, 0.0], 50, 100) == [0.25, 0.125]
    assert mtp_weights_at([0.5, 0.25], [0.0, 0.0], 150, 100) == [0.0, 0.0]
    assert mtp_weights_at([0.5], None, 70, 100) == [0.5]


@pytest.mark.parametrize("values,message", [
    (dict(no_attn_layers=[4]), "model.no_attn_layers=[4] names block(s) [4], but model.n_layer=4 has blocks 0..3; "
                               "use model.no_attn_layers=[]."),
    (dict(skips=[[1, 5]]), "model.skips (given [[1, 5]]) reaches block(s) past the last, 3"),
    (dict(skips=[[2, 1]]), "model.skips (given [[2, 1]]) must be a list of [from, to] block pairs with from < to"),
    (dict(skips=[[0, 1], [1, 5]]), "keep the pairs whose blocks are 0..3, or leave model.skips out for none."),
    (dict(value_embed_layers=[1, 2], no_attn_layers=[2]), "use model.value_embed_layers=[1]."),
    (dict(logit_softcap=15.0, logit_sigmoid_cap=[23, 5, 7.5]), "keep one: model.logit_softcap=null"),
    (dict(logit_sigmoid_cap=[23, 5]), "model.logit_sigmoid_cap=[23, 5] must be [A, B, C]"),
    (dict(mtp_weights=[0.5, 0.25], mtp_weights_end=[0.0]), "use model.mtp_weights_end=[0.0,0.0] (ramp to 0)"),
    (dict(mtp_weights=[-1.0]), "model.mtp_weights=[-1.0] must be a list of weights >= 0"),
    (dict(zero_init_proj=["out"]), "model.zero_init_proj=['out'] must be a list of distinct names from: attn, mlp"),
    (dict(init_scale=0.5, parametrization="mup"), "use model.init_scale=null under muP"),
    (dict(bigram_vocab=1), "model.bigram_vocab=1 must be 0 (off) or an integer >= 2"),
])
def test_bad_values_name_the_key_and_a_way_out(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        GPTConfig(**SMALL, **values)
    assert message in str(caught.value)


def test_muon_leaves_the_tables_and_scalars_to_adam() -> None:
    """Value and bigram embeddings are lookups like the token embedding; gates and scalars are not hidden matrices."""
    model = GPT(GPTConfig(**SMALL, **ALL))
    groups = {g["name"]: {id(p) for p in g["params"]} for g in muon_groups(model, 0.1)}
    muon = next(ids for name, ids in groups.items() if "muon" in name)
    tables = [model.bigram.table.weight, model.blocks[0].value_embed.table.weight]
    assert not any(id(p) in muon for p in tables)
    scalars = [model.smear.gate, model.shortcuts.x0_weights, model.blocks[1].attn_scalars]
    no_decay = next(ids for name, ids in groups.items() if "no_decay" in name)
    assert all(id(p) in no_decay for p in scalars)
    assert id(model.blocks[0].attn.qkv.weight) in muon


def test_count_parameters_follows_every_choice() -> None:
    for values in [*CHOICES.values(), ALL]:
        cfg = GPTConfig(**SMALL, **values)
        assert count_parameters(cfg)["total"] == GPT(cfg).num_parameters(), values


def _model(*overrides: str) -> dict:
    return OmegaConf.to_container(compose_config(list(overrides)).model, resolve=True)


def _choices(*overrides: str) -> dict:
    """What an arm may change: the model's keys, the stages' and the optimizer (its target)."""
    cfg = compose_config(list(overrides))
    model = OmegaConf.to_container(cfg.model, resolve=True)
    stages = {f"stages.{k}": v for k, v in OmegaConf.to_container(cfg.stages, resolve=True).items()}
    return {**model, **stages, "optimizer": cfg.optimizer._target_}


def test_the_speedrun_preset_counts_as_docs_model_md_says() -> None:
    """The record's shape: 635,702,699 parameters once model.untie_at has untied the head (597,069,227 before), the
    record's 635,887,015 in use (its head and embedding are two tensors from the start) minus its MUDD connections
    and gates (203,759), its 22 weight scalars and the attention-less block's 2 residual scalars, plus gptlab's
    RMSNorm and QK-norm gains (19,456) and the 11 x0 weights (docs/model.md, "The speedrun preset")."""
    values = _model("model=speedrun")
    tied = count_parameters(GPTConfig.from_dict(values))
    cfg = GPTConfig.from_dict({**values, "tie_weights": False, "untie_at": None})  # as after the untie
    counts = count_parameters(cfg)
    assert tied["total"] == 597_069_227 == counts["total"] - 50304 * 768
    assert counts["total"] == 635_702_699
    record_in_use = 635_887_015
    assert counts["total"] - record_in_use == -100_124 - 103_635 - 22 - 2 + 16_896 + 2_560 + 11
    assert counts["embedding"] == 50304 * 768 * 6 + 377_280 * 768  # token, 5 value embeddings, bigram
    assert counts["attention"] == 10 * (4 * 768 * 768 + 2 * 128) and counts["mlp"] == 11 * 2 * 3072 * 768
    assert counts["head"] == 50304 * 768 and counts["scalars"] == 42 + 11 + 1 + 5 * 72 + 13
    with torch.device("meta"):  # the built model agrees, without allocating it
        assert GPT(cfg).num_parameters() == counts["total"]
    long = [i for i in range(11) if cfg.layer_window(i) == cfg.attn_window]  # the others short: half the window
    assert long == [3, 10] and cfg.no_attn_layers == [6]  # as the record's (its block 6 has no attention)


ARMS = sorted(p.stem for p in (ROOT / "conf" / "speedrun_minus").glob("*.yaml"))


def test_each_arm_is_one_choice_both_ways() -> None:
    """Leave-one-out arm X turns off, in the record, exactly the keys add-one-in arm X turns on in GPT-2: the first
    sets them to GPT-2's values (nano's, AdamW's, no stages), the second to the record's (speedrun_nano's and the
    sweep's NorMuon and stages). `none` changes nothing. The gate and its value embeddings, and a window and its
    pattern, go together where one would have no effect without the other (preflight/option_relevance.py)."""
    assert ARMS == sorted(p.stem for p in (ROOT / "conf" / "speedrun_plus").glob("*.yaml"))
    gpt2 = _choices("experiment=ablate_speedrun_add_one_in", "+speedrun_plus=none")
    record = _choices("experiment=ablate_speedrun_leave_one_out", "+speedrun_minus=none")
    together = [{"value_embed_layers", "value_embed_gate"}, {"attn_pattern", "attn_window"}]
    for arm in ARMS:
        minus = _choices("experiment=ablate_speedrun_leave_one_out", f"+speedrun_minus={arm}")
        plus = _choices("experiment=ablate_speedrun_add_one_in", f"+speedrun_plus={arm}")
        off = {k for k in record if minus[k] != record[k]}
        on = {k for k in gpt2 if plus[k] != gpt2[k]}
        assert (off == set()) == (arm == "none"), (arm, off)
        assert off == on or any((off ^ on) <= pair <= off | on for pair in together), (arm, off, on)
        assert all(minus[k] == gpt2[k] for k in off) and all(plus[k] == record[k] for k in on), arm


# Every choice on, the multi-token weights ramping to 0 over the run: a run killed at step 4 and resumed from its
# checkpoint takes the same weights at steps 5..8 (a function of the step), so its losses equal the straight run's.
RUN = ["model=speedrun_nano", "model.n_layer=4", "model.mtp_weights_end=[0.0,0.0]", "trainer.max_steps=8",
       "trainer.val_check_interval=4"]
KILL = ["+callbacks.killer._target_=helpers.KillAtStep", "+callbacks.killer.step=4",
        "+callbacks.killer.signal_name=SIGTERM"]


def test_the_record_resumes_bit_exactly_mid_schedule(tmp_path: Path) -> None:
    train_in_process(tmp_path / "ref", *RUN)
    reference = scalars(tmp_path / "ref")["train/loss"]
    run = tmp_path / "run"
    with pytest.raises(PreemptedError):
        train_in_process(run, *RUN, *KILL)
    train_in_process(run, *RUN, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    resumed = scalars(run)["train/loss"]
    assert [resumed[s] for s in range(1, 9)] == [reference[s] for s in range(1, 9)]  # exact float equality
    flat = train_in_process(tmp_path / "flat", *RUN[:2], "trainer.max_steps=8", "trainer.val_check_interval=4")
    assert scalars(tmp_path / "flat")["train/loss"][8] != reference[8]  # the ramp changes training: a real check
    assert flat is not None
