"""optimizer=muon: torch's Muon on the hidden matrices (checked against a hand-written Newton–Schulz step), AdamW on
the rest, exact resume from a checkpoint, DDP on two CPU ranks, and a clear refusal under FSDP."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import compose_config, load_checkpoint, run_tiny, scalars, train_in_process
from hydra.utils import instantiate

from gptlab.errors import ConfigError, PreemptedError
from gptlab.model import GPT, GPTConfig
from gptlab.preflight.early_checks import check_config
from gptlab.train.muon import MuonAdamW, muon_groups
from gptlab.train.optim import param_groups

# Keller Jordan's quintic Newton–Schulz coefficients (https://kellerjordan.github.io/posts/muon/).
A, B, C = 3.4445, -4.775, 2.0315


def newton_schulz(m: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """The reference: X0 = M/||M||_F on the wide side, then X <- aX + (bS + cS²)X with S = XXᵀ; in bf16 as torch."""
    x = m.bfloat16()
    x = x.T if m.shape[0] > m.shape[1] else x
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        s = x @ x.T
        x = A * x + (B * s + C * s @ s) @ x
    return (x.T if m.shape[0] > m.shape[1] else x).float()


def tiny_model(**kw: object) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=30, block_size=8, n_layer=2, n_head=2, n_embd=16, **kw))


@pytest.mark.parametrize("shape", [(3, 5), (6, 4)])  # wide, and tall (orthogonalized through its transpose)
def test_muon_step_is_the_hand_computed_newton_schulz_step(shape: tuple[int, int]) -> None:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(*shape))
    bias = torch.nn.Parameter(torch.randn(shape[0]))
    groups = [{"params": [w], "muon": True, "weight_decay": 0.1}, {"params": [bias], "muon": False,
                                                                  "weight_decay": 0.0}]
    lr, wd, mu = 0.05, 0.1, 0.95
    opt = MuonAdamW(groups, lr=lr, weight_decay=wd, momentum=mu, adjust_lr_fn="match_rms_adamw")
    buf = torch.zeros(shape)
    expected = w.detach().clone()
    for _ in range(2):  # the second step reads the momentum buffer of the first
        grad = torch.randn(shape)
        w.grad, bias.grad = grad.clone(), torch.randn(shape[0])
        opt.step()
        buf = mu * buf + (1 - mu) * grad  # torch's EMA momentum; Nesterov looks one step ahead of it
        update = newton_schulz(grad + mu * (buf - grad))
        expected = expected * (1 - lr * wd) - lr * 0.2 * math.sqrt(max(shape)) * update
        torch.testing.assert_close(w.detach(), expected, atol=2e-3, rtol=0)
    singular = torch.linalg.svdvals(update)
    assert singular.min() > 0.5 and singular.max() < 1.5  # near-orthogonal, as the quintic promises
    assert opt.adamw.state[bias]["step"] == 2 and bias not in opt.muon.state  # the bias: AdamW's, twice
    assert "momentum_buffer" in opt.muon.state[w] and w not in opt.adamw.state


def test_hidden_matrices_go_to_muon_and_embeddings_head_norms_biases_to_adamw() -> None:
    for tie in (True, False):
        model = tiny_model(tie_weights=tie)
        factory = instantiate(compose_config(["optimizer=muon"], "/tmp/unused").optimizer)
        groups = param_groups(factory, model, 0.1)
        assert groups == muon_groups(model, 0.1)
        hidden = {id(p) for g in groups if g["muon"] for p in g["params"]}
        names = {n for n, p in model.named_parameters() if id(p) in hidden}
        assert names == {f"blocks.{i}.{m}.weight" for i in range(2)
                         for m in ("attn.qkv", "attn.out", "mlp.layers.0", "mlp.layers.2")}
        adam = {n for n, p in model.named_parameters() if id(p) not in hidden}
        assert {"tok_emb.weight", "pos_emb.weight"} <= adam and ("head.weight" in adam) != tie
        assert sum(p.numel() for g in groups for p in g["params"]) == model.num_parameters()
        opt = factory(groups)
        assert isinstance(opt.muon, torch.optim.Muon) and isinstance(opt.adamw, torch.optim.AdamW)
        assert [g["lr"] for g in opt.param_groups] == [4e-3] * len(groups)


def test_non_muon_groups_and_fsdp_are_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="muon_groups"):
        MuonAdamW([torch.nn.Parameter(torch.zeros(2, 2))], lr=1e-3)
    cfg = compose_config(["optimizer=muon", "trainer=fsdp"], tmp_path)
    with pytest.raises(ConfigError, match="optimizer=muon cannot run under trainer=fsdp.*trainer=ddp"):
        check_config(cfg)
    check_config(compose_config(["optimizer=muon", "trainer=ddp"], tmp_path))  # DDP holds whole matrices: accepted


RUN = ["optimizer=muon", "trainer.max_steps=8", "trainer.val_check_interval=4"]
KILL = ["+callbacks.killer._target_=helpers.KillAtStep", "+callbacks.killer.step=4",
        "+callbacks.killer.signal_name=SIGTERM"]


def test_muon_run_resumes_bit_exactly(tmp_path: Path) -> None:
    train_in_process(tmp_path / "ref", *RUN)
    reference = scalars(tmp_path / "ref")["train/loss"]
    assert sorted(reference) == list(range(1, 9))  # at the steps done
    run = tmp_path / "run"
    with pytest.raises(PreemptedError):
        train_in_process(run, *RUN, *KILL)
    state = load_checkpoint(run / "checkpoints" / "last.ckpt")
    opt_state = state["optimizer_states"][0]
    assert set(opt_state) == {"muon", "adamw"}
    assert all("momentum_buffer" in s for s in opt_state["muon"]["state"].values())
    train_in_process(run, *RUN, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    resumed = scalars(run)["train/loss"]
    assert [resumed[s] for s in range(1, 9)] == [reference[s] for s in range(1, 9)]  # exact float equality


def test_muon_trains_under_ddp_on_two_cpu_ranks(tmp_path: Path) -> None:
    proc = run_tiny(tmp_path, "optimizer=muon", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                    "trainer.max_steps=3", "trainer.val_check_interval=3", check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")  # RankConsistencyCheck passed: ranks agree
    assert state["global_step"] == 3 and set(state["optimizer_states"][0]) == {"muon", "adamw"}
