"""Training end to end: the loss falls, the entry script writes what it promises, and resumes."""

from __future__ import annotations

import math
from itertools import islice
from pathlib import Path

import hydra
import torch
from helpers import TINY_RUN, compose_config, run_train, scalars

from gptlab.apps.train import train
from gptlab.data import ByteTokenizer, GPTDataModule
from gptlab.model import GPT, next_token_loss
from gptlab.preflight.early_checks import build_model_config


def _val_loss(model: GPT, dm: GPTDataModule, batches: int) -> float:
    model.eval()
    with torch.no_grad():
        losses = [next_token_loss(model(x), y).item() for x, y in islice(dm.val_dataloader(), batches)]
    return sum(losses) / len(losses)


def test_short_training_lowers_val_loss_by_a_third(tmp_path: Path) -> None:
    # The first 20 of 138 val batches (in order, the same ones each time): validation was most of the test's time.
    overrides = TINY_RUN + ["model.n_layer=2", "model.n_embd=64", "model.block_size=64", "trainer.max_steps=120",
                            "trainer.val_check_interval=60", "scheduler.warmup_steps=10", "optimizer.lr=3e-3",
                            "trainer.limit_val_batches=20"]
    cfg = compose_config(overrides, tmp_path)
    torch.manual_seed(cfg.seed)
    dm = hydra.utils.instantiate(cfg.data, tokenizer=ByteTokenizer())  # the run's own validation windows
    dm.setup()
    before = _val_loss(GPT(build_model_config(cfg.model, 257)), dm, batches=20)
    assert abs(before - math.log(257)) < 0.3  # an untrained model is close to uniform
    best = train(cfg)
    assert best is not None and best <= 0.7 * before, (before, best)


def test_fast_dev_run_through_the_composed_config(tmp_path: Path) -> None:
    cfg = compose_config(TINY_RUN + ["debug=fast_dev_run"], tmp_path)
    assert cfg.trainer.fast_dev_run is True
    train(cfg)  # one train and one val batch through every object the config names


def test_entry_script_logs_checkpoints_and_resumes(tmp_path: Path) -> None:
    first = tmp_path / "first"
    args = TINY_RUN + ["trainer.val_check_interval=6", "trainer.log_every_n_steps=3", "trainer.limit_val_batches=8"]
    proc = run_train(args + ["trainer.max_steps=12", f"hydra.run.dir={first}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logged = scalars(first)
    for tag in ("train/loss", "val/loss", "val/ppl", "train/lr"):
        assert tag in logged, sorted(logged)
    val = logged["val/loss"]
    assert sorted(val) == [6, 12] and val[12] < val[6]  # at the steps done, as the checkpoint names say
    assert math.isclose(logged["val/ppl"][12], math.exp(val[12]), rel_tol=1e-4)
    assert (first / "config_resolved.yaml").read_text().count("n_embd: 32") == 1
    last = first / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 12 and ckpt["hyper_parameters"]["model"]["n_embd"] == 32
    assert len(list((first / "checkpoints").glob("step*.ckpt"))) == 1  # the best one

    second = tmp_path / "second"
    proc = run_train(args + ["trainer.max_steps=18", f"ckpt_path={last}", f"hydra.run.dir={second}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = sorted(scalars(second)["train/loss"])
    assert min(steps) > 12 and max(steps) >= 15  # continued from step 12, not from 0
    assert torch.load(second / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 18
