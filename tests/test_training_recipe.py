"""The training recipe as configs: schedules, optimizers, gradient accumulation from global_batch_tokens,
activation checkpointing."""

from __future__ import annotations

import math
from pathlib import Path

import hydra
import pytest
import torch
from helpers import compose_tiny, load_checkpoint, train_in_process
from omegaconf import OmegaConf

from gptlab.apps.build import gradient_accumulation
from gptlab.config.schemas import Cosine, WarmupStableDecay
from gptlab.config.validate import check_fields
from gptlab.errors import ConfigError
from gptlab.execution.checkpointing import checkpoint_blocks
from gptlab.model import GPT, GPTConfig, next_token_loss
from gptlab.train.optim import constant, warmup_cosine, warmup_stable_decay, weight_decay_groups

PEAK = 1.0


def _lrs(make, total: int = 1000, **kwargs) -> list[float]:
    """The lr at every step 0..total, as the trainer would see it (one scheduler.step() per optimizer step)."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    sched = make(opt, total_steps=total, **kwargs)
    lrs = []
    for _ in range(total + 1):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_cosine_warmup_end_mid_decay_and_end() -> None:
    lrs = _lrs(warmup_cosine, warmup_steps=100, min_lr_ratio=0.1)
    assert lrs[0] == pytest.approx(0.01) and lrs[99] == pytest.approx(PEAK)  # linear warmup reaches the peak
    assert lrs[100] == pytest.approx(PEAK)
    assert lrs[550] == pytest.approx(0.1 + 0.9 * 0.5)  # half way through the decay: cos(pi/2) = 0
    assert lrs[1000] == pytest.approx(0.1)  # GPT-3: 10% of the peak at the end


def test_wsd_warmup_end_stable_mid_decay_and_end() -> None:
    lrs = _lrs(warmup_stable_decay, warmup_steps=100, decay_fraction=0.2, min_lr_ratio=0.0)
    assert lrs[99] == pytest.approx(PEAK)
    assert lrs[100] == lrs[500] == lrs[800] == pytest.approx(PEAK)  # stable until the last 20%
    assert lrs[900] == pytest.approx(0.5)  # linear decay, half way
    assert lrs[1000] == pytest.approx(0.0)


def test_constant_warmup_then_flat() -> None:
    lrs = _lrs(constant, warmup_steps=10)
    assert lrs[4] == pytest.approx(0.5) and lrs[9] == pytest.approx(PEAK)
    assert lrs[500] == lrs[1000] == pytest.approx(PEAK)
    assert _lrs(constant, warmup_steps=0)[0] == PEAK


def test_schedule_arguments_are_checked() -> None:
    """By the schedules' schemas, before anything is built (a decay over no steps would divide by zero)."""
    with pytest.raises(ConfigError, match=r"scheduler.decay_fraction=0.0 is invalid: use a number in \(0, 1\]"):
        check_fields("scheduler.", OmegaConf.create({"decay_fraction": 0.0}), WarmupStableDecay)
    with pytest.raises(ConfigError, match=r"scheduler.min_lr_ratio=2.0 is invalid: use a number in \[0, 1\]"):
        check_fields("scheduler.", OmegaConf.create({"min_lr_ratio": 2.0}), Cosine)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    with pytest.raises(ConfigError, match="trainer.max_steps >= 1"):
        warmup_cosine(opt, total_steps=0, warmup_steps=0, min_lr_ratio=0.1)


@pytest.mark.parametrize("name", ["adamw", "sgd", "adafactor"])
@pytest.mark.parametrize("schedule", ["cosine", "wsd", "constant"])
def test_every_optimizer_and_schedule_config_builds_and_steps(name: str, schedule: str, tmp_path: Path) -> None:
    cfg = compose_tiny(tmp_path, f"optimizer={name}", f"scheduler={schedule}")
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))
    factory = hydra.utils.instantiate(cfg.optimizer)
    opt = factory(weight_decay_groups(model, factory.keywords.get("weight_decay", 0.0)))
    sched = hydra.utils.instantiate(cfg.scheduler)(opt, total_steps=100)
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randint(0, 11, (2, 8))
    next_token_loss(model(x), x).backward()
    opt.step()
    sched.step()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    if name == "adamw":
        assert opt.defaults["fused"] is True  # the CPU has a fused AdamW
        assert opt.param_groups[0]["betas"] == (0.9, 0.95) and opt.param_groups[0]["weight_decay"] == 0.1
        assert opt.param_groups[1]["weight_decay"] == 0.0  # biases and norms


def test_gradient_accumulation_is_derived_or_rejected() -> None:
    assert gradient_accumulation(524288, micro_batch=16, block_size=2048, devices=8, nodes=2) == 1
    assert gradient_accumulation(524288, micro_batch=8, block_size=2048, devices=8, nodes=1) == 4
    with pytest.raises(ConfigError, match=r"global_batch_tokens=500000 .* 131072 tokens; use e.g. 524288"):
        gradient_accumulation(500000, micro_batch=8, block_size=2048, devices=8, nodes=1)


def test_accumulating_4_micro_batches_of_2_equals_batch_8(tmp_path: Path) -> None:
    """Same 8 windows per optimizer step either way (the sampler deals indices in order); fp32, dropout 0.
    SGD, whose step is linear in the gradient: AdamW divides by sqrt(v), which turns the float rounding of a
    near-zero gradient (summed in another order when accumulated) into a step of the size of the learning rate."""
    common = ["trainer.max_steps=3", "trainer.val_check_interval=3", "model.dropout=0.0", "callbacks.text_samples=null",
              "optimizer=sgd"]
    train_in_process(tmp_path / "big", *common, "data.batch_size=8")
    train_in_process(tmp_path / "acc", *common, "data.batch_size=2", "global_batch_tokens=256")  # 8 x 32
    train_in_process(tmp_path / "small", *common, "data.batch_size=2")  # a control: 2 per step, no accumulation
    weights = {name: load_checkpoint(tmp_path / name / "checkpoints" / "last.ckpt")["state_dict"]
               for name in ("big", "acc", "small")}
    diff = max((weights["big"][k] - weights["acc"][k]).abs().max().item() for k in weights["big"])
    control = max((weights["big"][k] - weights["small"][k]).abs().max().item() for k in weights["big"])
    assert diff < 1e-6
    assert control > 1e-4  # the comparison can tell different batches apart


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    torch.manual_seed(0)
    cfg = dict(vocab_size=13, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.1)
    plain, ckpt = GPT(GPTConfig(**cfg)), GPT(GPTConfig(**cfg))
    checkpoint_blocks(ckpt, "full")  # runtime.activation_checkpointing=true
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randint(0, 13, (3, 16))
    grads = []
    for model in (plain, ckpt):
        torch.manual_seed(1)  # same dropout masks; checkpoint replays the RNG state in the recomputation
        next_token_loss(model(x), x).backward()
        grads.append([p.grad for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert math.isfinite(sum(g.sum().item() for g in grads[1]))


def test_bf16_mixed_precision_trains_with_gradient_clipping(tmp_path: Path) -> None:
    """Mixed precision with AdamW's default fused=null: the fused kernel, whose gradients gptlab clips itself
    (Lightning's precision plugin refuses any fused optimizer under AMP)."""
    best = train_in_process(tmp_path, "trainer.precision=bf16-mixed", "trainer.max_steps=2",
                            "trainer.val_check_interval=2")
    assert best is not None and math.isfinite(best)
    state = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert state["optimizer_states"][0]["param_groups"][0]["fused"] is True
