"""The speedrun's schedules over training (stages.windows, stages.seq_lens, stages.batch_sizes with the lr scaled by the
batch ratio, model.untie_at): each against a hand-written reference of its formula, the untie's optimizer state, and
one tiny run with all of them that resumes bit-exactly on both sides of a stage boundary and of the untie."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from helpers import compose_config, load_checkpoint, scalars, train_in_process
from hydra.utils import instantiate

from gptlab.config.schemas import Stages
from gptlab.errors import ConfigError, PreemptedError
from gptlab.interop import from_pretrained, save_pretrained
from gptlab.model import GPT, GPTConfig
from gptlab.preflight.early_checks import check_config
from gptlab.report.runs import job_model, model_cost, read_job
from gptlab.train.optim import param_groups, scale_group_lrs
from gptlab.train.stages import StagePlan, stage_value, untie

MODEL = dict(vocab_size=30, block_size=8, n_layer=2, n_head=2, n_embd=16)


def test_a_schedule_splits_the_run_into_equal_stages() -> None:
    assert [stage_value([10, 20, 30], s, 9) for s in range(10)] == [10, 10, 10, 20, 20, 20, 30, 30, 30, 30]
    assert [stage_value(["a", "b"], s, 5) for s in range(6)] == ["a", "a", "a", "b", "b", "b"]  # 2 s // 5


def test_the_batch_of_a_stage_is_its_rows_cut_into_its_sequences() -> None:
    plan = StagePlan(Stages(seq_lens=[2, 4], batch_sizes=[1, 3], batch_lr_exponent=0.5), total_steps=4)
    x = torch.arange(12).view(3, 4)  # 3 rows of 4 tokens; targets are the next tokens
    y, ids = x + 100, torch.tensor([[0, 0, 1, 1]] * 3)
    bx, by, bids = plan.batch((x, y, ids), step=1)  # stage 0: 1 row, sequences of 2
    assert bx.tolist() == [[0, 1], [2, 3]] and by.tolist() == [[100, 101], [102, 103]]
    assert bids.tolist() == [[0, 0], [1, 1]]
    bx, by, _ = plan.batch((x, y, ids), step=2)  # stage 1: 3 rows of 4, as the loader gave them
    assert torch.equal(bx, x) and torch.equal(by, y)
    assert plan.lr_factor(0) == 1.0 and plan.lr_factor(3) == pytest.approx(math.sqrt(3 / 1))
    assert StagePlan(Stages(), 4).batch((x, y), 0) == (x, y)  # no schedule: the loader's batch itself


def test_a_schedule_scales_the_lr_schedule_by_the_batch_ratio() -> None:
    model = GPT(GPTConfig(**MODEL))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 10)
    plan = StagePlan(Stages(batch_sizes=[2, 8]), total_steps=4)  # p = 0.6, record 46's
    scheduler = plan.scale_lr(warmup, opt)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    assert lrs == pytest.approx([0.1 * (s + 1) / 10 * (1 if s < 2 else 4**0.6) for s in range(4)])
    assert scheduler.state_dict()["lr_lambdas"] == [None]  # plain functions: a checkpoint holds the step alone


def reference_band_attention(attn: torch.nn.Module, x: torch.Tensor, band: int) -> torch.Tensor:
    """Eq. 5 with the local mask written out: query i sees keys i - band < j <= i."""
    B, T, D = x.shape
    H, d = attn.n_head, attn.head_dim
    q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in attn.qkv(x).split(H * d, dim=-1))
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    scores = scores.masked_fill(~((j <= i) & (i - j < band)), float("-inf"))
    return attn.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * d))


def test_a_stage_window_reaches_local_and_short_layers() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**MODEL, attn_pattern=["local", "short"], attn_window=6, attn_impl="sdpa"))
    assert [b.attn.window for b in model.blocks] == [6, 3]
    model.use_window(4)
    assert [b.attn.window for b in model.blocks] == [4, 2]  # the short layer: half the stage's window
    x = torch.randn(2, 8, 16)
    for block, band in zip(model.blocks, (4, 2)):
        torch.testing.assert_close(block.attn(x), reference_band_attention(block.attn, x, band))
    strided = GPT(GPTConfig(**MODEL, attn_pattern=["strided"], attn_window=3))
    strided.use_window(5)
    assert strided.blocks[0].attn.window == 3  # a stride is no window: the schedule leaves it


@pytest.mark.parametrize("optimizer", ["adamw", "muon", "normuon"])
def test_untying_gives_the_embedding_the_heads_state_and_a_fresh_build_the_same_groups(optimizer: str) -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**MODEL, untie_at=0.5))
    factory = instantiate(compose_config([f"optimizer={optimizer}"], "/tmp/unused").optimizer)
    opt = factory(param_groups(factory, model, 0.1))
    scale_group_lrs(opt)
    idx = torch.randint(0, 30, (2, 8))
    for _ in range(2):
        model(idx).logsumexp(-1).mean().backward()
        opt.step()
        opt.zero_grad()
    before = model(idx)
    tied = model.head.weight
    new = model.untie_head()
    untie(model, new, opt, param_groups(factory, model, 0.1))
    assert model.head.weight is tied and model.tok_emb.weight is new and not model.head_tied
    torch.testing.assert_close(model(idx), before, rtol=0, atol=0)  # the same function, two parameters now
    parts = getattr(opt, "parts", (opt,))
    owner = next(p for p in parts if tied in p.state)
    assert new in owner.state or any(new in p.state for p in parts)
    copied = next(p.state[new] for p in parts if new in p.state)
    for key, value in owner.state[tied].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(copied[key], value) and copied[key] is not value
    fresh = factory(param_groups(factory, model, 0.1))  # what a run resumed after the untie builds
    fresh.load_state_dict(opt.state_dict())
    assert [len(g["params"]) for g in fresh.param_groups] == [len(g["params"]) for g in opt.param_groups]
    model(idx).logsumexp(-1).mean().backward()
    opt.step()
    assert not torch.equal(model.head.weight, model.tok_emb.weight)  # trained apart from here on


def test_an_untied_state_loads_into_a_model_built_tied_and_exports_untied(tmp_path: Path) -> None:
    model = GPT(GPTConfig(**MODEL, untie_at=0.5))
    model.untie_head()
    with torch.no_grad():
        model.head.weight.add_(1.0)
    again = GPT(GPTConfig(**MODEL, untie_at=0.5))
    again.load_state_checked(model.state_dict(), "memory", "")
    assert not again.head_tied and torch.equal(again.head.weight, model.head.weight)
    assert torch.equal(again.tok_emb.weight, model.tok_emb.weight)
    save_pretrained(again, tmp_path)  # Hugging Face's GPT-2 holds an untied head: tie_word_embeddings false
    assert json.loads((tmp_path / "config.json").read_text())["tie_word_embeddings"] is False
    idx = torch.randint(0, 30, (2, 8))
    torch.testing.assert_close(from_pretrained(tmp_path)(idx), model(idx), rtol=0, atol=0)


def test_schedules_that_cannot_run_are_refused_with_the_fix(tmp_path: Path) -> None:
    for overrides, words in [
        (["stages.seq_lens=[24]"], "stages.seq_lens=[24] must divide data.block_size=256"),
        (["stages.batch_sizes=[8,64]"], "set data.batch_size=64"),
        (["model.untie_at=0.5", "trainer=ddp"], "model.untie_at=0.5 trains on one rank only"),
        (["model.untie_at=0.5", "trainer=fsdp"], "model.untie_at=0.5 cannot run under trainer=fsdp"),
        (["model.untie_at=0.5", "model.tie_weights=false"], "model.untie_at=0.5 has no effect"),
        (["stages.windows=[64]"], "stages.windows=[64] has no effect"),
        (["model.untie_at=1.5"], "model.untie_at=1.5 must be a fraction in (0, 1)"),
        (["stages.windows=[0]"], "stages.windows=[0] is invalid: use a list of whole numbers >= 1"),
    ]:
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            check_config(compose_config(overrides, tmp_path))


# One tiny run with every schedule and the untie: 8 steps in two stages (boundary and untie at step 4), NorMuon.
RUN = ["model.n_layer=2", "model.attn_pattern=[local,short]", "model.attn_window=32", "stages.windows=[8,16]",
       "stages.seq_lens=[16,32]", "stages.batch_sizes=[2,4]", "model.untie_at=0.5", "optimizer=normuon",
       "trainer.max_steps=8", "trainer.val_check_interval=8", "scheduler.warmup_steps=2",
       "callbacks.text_samples=null", "callbacks.periodic_checkpoint=null"]
KILL = ["+callbacks.killer._target_=helpers.KillAtStep", "+callbacks.killer.signal_name=SIGTERM"]


def test_a_run_with_every_schedule_resumes_bit_exactly_across_the_boundary_and_the_untie(tmp_path: Path) -> None:
    train_in_process(tmp_path / "ref", *RUN)
    reference = scalars(tmp_path / "ref")
    assert sorted(reference["train/loss"]) == list(range(1, 9))
    # One parameter count for the run, the banner and the reports (the model as built, tied), the untied one beside it
    summary = json.loads((tmp_path / "ref" / "run_summary.json").read_text())
    built = job_model(tmp_path / "ref")
    assert summary["parameters"] == model_cost(tmp_path / "ref").parameters
    assert summary["parameters_after_untie"] - summary["parameters"] == built.vocab_size * built.n_embd
    # Tokens trained on, not the loader's: stages.batch_sizes=[2,4] skips rows of the first 4 steps' micro-batches
    rows = yaml.safe_load((tmp_path / "ref" / "config_resolved.yaml").read_text())["data"]["batch_size"]
    trained = sum(summary["tokens_per_step"] * (2 if step < 4 else 4) // rows for step in range(8))
    assert trained < 8 * summary["tokens_per_step"] and summary["tokens_seen"] == trained
    assert reference["x_throughput/tokens_seen"][8] == trained
    job = read_job(tmp_path / "ref", {}, summary)
    assert job.val_curve[-1].step == 8 and job.val_curve[-1].tokens == trained  # the reports' token axis
    # The NorMuon group's lr, logged with the step it was used in (train/lr at k: global step k - 1): 0.06 times
    # scheduler=cosine's factor (warmup 2, down to 0.1 at 8) times (4 / 2)^0.6 from global step 4 on.
    cosine = [(s + 1) / 2 if s < 2 else 0.1 + 0.45 * (1 + math.cos(math.pi * (s - 2) / 6)) for s in range(8)]
    expected = [0.06 * f * (2**0.6 if s >= 4 else 1.0) for s, f in enumerate(cosine)]
    assert [reference["train/lr"][k] for k in range(1, 9)] == pytest.approx(expected, rel=1e-6)
    run, last = tmp_path / "run", tmp_path / "run" / "checkpoints" / "last.ckpt"
    with pytest.raises(PreemptedError):  # saved after step 3: before the boundary
        train_in_process(run, *RUN, *KILL, "+callbacks.killer.step=2")
    assert load_checkpoint(last)["state_dict"]["model.head_untied"].item() is False
    with pytest.raises(PreemptedError):  # resumed across the boundary and the untie; saved after step 6
        train_in_process(run, *RUN, *KILL, "+callbacks.killer.step=5", f"ckpt_path={last}")
    state = load_checkpoint(last)
    assert state["global_step"] == 6 and state["state_dict"]["model.head_untied"].item() is True
    assert not torch.equal(state["state_dict"]["model.head.weight"], state["state_dict"]["model.tok_emb.weight"])
    train_in_process(run, *RUN, f"ckpt_path={last}")  # resumed untied
    resumed = scalars(run)["train/loss"]
    assert [resumed[s] for s in range(1, 9)] == [reference["train/loss"][s] for s in range(1, 9)]  # exact
