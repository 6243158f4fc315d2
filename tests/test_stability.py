"""Stability probes on a model whose probe values are known in closed form, the loss-spike guard skipping an
injected spike and nothing else, and both callbacks in a real run's TensorBoard."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import scalars, train_in_process
from omegaconf import OmegaConf

from gptlab.config.callbacks import LossSpikeGuard as LossSpikeSchema
from gptlab.config.validate import check_node
from gptlab.errors import ConfigError, LossSpikeError
from gptlab.model import GPT, GPTConfig
from gptlab.train.callbacks import LossSpikeGuard
from gptlab.train.callbacks.stability import block_grad_norms, block_weights, forward_probes, update_ratios

TARGET = LossSpikeSchema._target_

V, T, W = 40, 12, 4


def known_model(**fields) -> GPT:
    """Q = K = 0 (uniform attention), blocks that write nothing into the residual stream, every token embedded as
    the constant 0.5: the residual RMS is 0.5, row i of a dense layer has entropy log(i + 1) (log min(i + 1, w)
    for a local one), every score is 0, and the final LayerNorm maps the constant to 0, so log Z = log V."""
    cfg = GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=8, attn_pattern=["dense", "local"],
                    attn_window=W, **fields)
    model = GPT(cfg)
    with torch.no_grad():
        for block in model.blocks:
            for module in (block.attn.qkv, block.attn.out, block.mlp.layers[-1]):
                module.weight.zero_()
                module.bias.zero_()
        model.tok_emb.weight.fill_(0.5)
        model.pos_emb.weight.zero_()
    return model


@pytest.mark.parametrize("fields", [{}, {"qk_norm": True, "norm_type": "rmsnorm"}])
def test_forward_probes_on_known_weights(fields: dict) -> None:
    probes = forward_probes(known_model(**fields), torch.randint(0, V, (2, T)))
    dense = sum(math.log(i + 1) for i in range(T)) / T
    local = sum(math.log(min(i + 1, W)) for i in range(T)) / T
    assert probes["x_probes/attn_entropy/layer_0"] == pytest.approx(dense, rel=1e-5)
    assert probes["x_probes/attn_entropy/layer_1"] == pytest.approx(local, rel=1e-5)
    assert probes["x_probes/attn_logit_max/layer_0"] == 0.0 and probes["x_probes/attn_logit_max/layer_1"] == 0.0
    for key in ("embed_out", "block_0", "block_1"):
        assert probes[f"x_probes/residual_rms/{key}"] == pytest.approx(0.5)
    norm_type = fields.get("norm_type", "layernorm")
    expected_z = math.log(V) ** 2 if norm_type == "layernorm" else None  # RMSNorm keeps the constant: not 0
    if expected_z is not None:
        assert probes["x_probes/z_loss"] == pytest.approx(expected_z, rel=1e-5)


def test_max_logit_is_the_largest_scaled_score() -> None:
    """Every position holds token 0 (embedding e, no position term) and head 0 has Q = 2 I, K = 3 I on its 4 dims:
    every score of head 0 is 6 x·x / sqrt(4) with x = LayerNorm(e)[:4]; head 1's are 0."""
    model = known_model()
    with torch.no_grad():
        model.tok_emb.weight[0] = torch.randn(8)
        qkv = model.blocks[0].attn.qkv
        qkv.weight[0:4, 0:4] = torch.eye(4) * 2
        qkv.weight[8:12, 0:4] = torch.eye(4) * 3
        idx = torch.zeros(1, T, dtype=torch.long)
        probes = forward_probes(model, idx)
        x = model.blocks[0].norm_1(model.embed(idx))[0, 0, :4]
    assert float(x @ x) > 0.1
    assert probes["x_probes/attn_logit_max/layer_0"] == pytest.approx(float(6 * x @ x / 2), rel=1e-5)


def test_grad_norm_and_update_ratio_per_block() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=8))
    model(torch.randint(0, V, (2, T))).square().mean().backward()
    grads = block_grad_norms(model)
    before = block_weights(model)
    lr = 0.1
    torch.optim.SGD(model.parameters(), lr=lr).step()
    ratios = update_ratios(before, model)
    for i, block in enumerate(model.blocks):
        assert grads[f"x_probes/grad_norm/block_{i}"] == pytest.approx(
            math.sqrt(sum(float(p.grad.square().sum()) for p in block.parameters())), rel=1e-5)
        matrices = [p for p in block.parameters() if p.dim() >= 2]
        step = math.sqrt(sum(float((lr * p.grad).square().sum()) for p in matrices))
        weight = math.sqrt(sum(float(w.square().sum()) for w in before[i]))
        assert ratios[f"x_probes/update_ratio/block_{i}"] == pytest.approx(step / weight, rel=1e-4)


class _Module(torch.nn.Module):
    """What the guard needs of a LightningModule: parameters and `log` (recorded)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))
        self.logged: dict[str, float] = {}

    def log(self, name: str, value: float, **_: object) -> None:
        self.logged[name] = value


def _trainer(step: int) -> SimpleNamespace:
    """What the guard reads of a Trainer: the step, and that the step logs (each is a last micro-batch)."""
    return SimpleNamespace(global_step=step, _logger_connector=SimpleNamespace(should_update_logs=True),
                           fit_loop=SimpleNamespace(_should_accumulate=lambda: False))


def _train(guard: LossSpikeGuard, losses: list[float]) -> list[bool]:
    """One SGD step per loss (gradient 1 on every weight); True where the weights moved."""
    module = _Module()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    moved = []
    for step, loss in enumerate(losses):
        guard.on_before_backward(None, module, torch.tensor(loss))
        module.w.grad = torch.ones(3)
        before = module.w.detach().clone()
        guard.on_before_optimizer_step(_trainer(step), module, optimizer)
        optimizer.step()
        moved.append(not torch.equal(before, module.w.detach()))
    if guard.z_threshold is not None:
        assert module.logged["train/skipped_steps"] == guard.skipped
    return moved


def test_spike_guard_skips_the_injected_spike_and_nothing_else() -> None:
    torch.manual_seed(0)
    losses = [3.0 - 0.01 * i + 0.02 * float(torch.randn(())) for i in range(60)]
    losses[40] = 6.0  # the spike
    guard = LossSpikeGuard(z_threshold=6.0, window=30, min_history=10)
    moved = _train(guard, losses)
    assert [i for i, m in enumerate(moved) if not m] == [40] and guard.skipped == 1
    assert 6.0 not in guard.history  # the spike does not widen the band


def test_spike_guard_off_by_default_and_stops_after_too_many() -> None:
    assert all(_train(LossSpikeGuard(), [1.0] * 30 + [100.0] * 5))  # z_threshold null: never skips
    guard = LossSpikeGuard(z_threshold=3.0, window=20, min_history=10, max_consecutive=3)
    # The 3rd spike is the 23rd step (global_step 22 before it): named as TensorBoard's train/loss counts it.
    with pytest.raises(LossSpikeError, match=r"skipped 3 optimizer steps in a row \(step 23: loss 50.*loss_spike"):
        _train(guard, [1.0 + 0.01 * (i % 3) for i in range(20)] + [50.0] * 5)
    with pytest.raises(ConfigError, match=r"callbacks.loss_spike.window=1 is invalid: use an integer >= 2"):
        check_node("callbacks.loss_spike.", OmegaConf.create({"_target_": TARGET, "z_threshold": 3.0, "window": 1}))
    with pytest.raises(ConfigError, match="callbacks.loss_spike.min_history=20 exceeds window=10"):
        LossSpikeGuard(z_threshold=3.0, window=10)  # a rule across two values: the constructor's own


def test_probes_spike_guard_and_z_loss_in_a_real_run(tmp_path: Path) -> None:
    train_in_process(tmp_path, "trainer.max_steps=4", "callbacks.stability_probes.every_n_steps=2", "model.z_loss=1e-3",
                     "callbacks.loss_spike.z_threshold=6.0", "model.pos_emb=rope", "model.qk_norm=true",
                     "callbacks.text_samples=null")
    logged = scalars(tmp_path)
    assert set(logged["x_probes/attn_entropy/layer_0"]) == {1, 3}  # probed before steps 1 and 3; at the steps done
    assert {"x_probes/grad_norm/block_0", "x_probes/update_ratio/block_0", "x_probes/residual_rms/block_0",
            "x_probes/attn_logit_max/layer_0", "x_probes/z_loss"} <= set(logged)
    assert all(v > 0 for v in logged["train/z_loss"].values()) and len(logged["train/z_loss"]) == 4
    assert set(logged["train/skipped_steps"].values()) == {0.0}
