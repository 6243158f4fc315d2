"""A continued run is what was asked or refused (issue 46 item 6): optimizer values changed on resume are applied
and logged, never recorded in config_resolved.yaml and ignored. One tiny training (2 steps) is shared by the file."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import TINY_RUN, load_checkpoint, train_in_process

from gptlab.train.optim import warmup_cosine_factor

RUN = [*TINY_RUN, "data.store=memory", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
       "scheduler=cosine", "scheduler.warmup_steps=2", "callbacks.text_samples=null"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """2 steps at the default lr 4e-3, weight_decay 0.1, betas (0.9, 0.95)."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    train_in_process(run_dir, *RUN, "trainer.max_steps=2")
    return run_dir


def continued(trained: Path, tmp_path: Path, *overrides: str) -> dict:
    """The last checkpoint of a run continued from `trained` to step 3 with `overrides`."""
    run_dir = tmp_path / "continued"
    train_in_process(run_dir, *RUN, "trainer.max_steps=3", f"ckpt_path={trained / 'checkpoints' / 'last.ckpt'}",
                     *overrides)
    return load_checkpoint(run_dir / "checkpoints" / "last.ckpt")


def test_changed_optimizer_values_apply_on_resume_and_are_logged(trained: Path, tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="gptlab")
    ckpt = continued(trained, tmp_path, "optimizer.lr=1e-2", "optimizer.weight_decay=0.05", "optimizer.betas=[0.8,0.9]")
    groups = {g["name"]: g for g in ckpt["optimizer_states"][0]["param_groups"]}
    factor = warmup_cosine_factor(3, 3, 2, 0.1)  # the schedule at step 3 of 3, as a run started at 1e-2 has it
    assert groups["decay"]["lr"] == pytest.approx(1e-2 * factor, rel=1e-12)
    assert ckpt["lr_schedulers"][0]["base_lrs"] == [1e-2, 1e-2]
    assert groups["decay"]["weight_decay"] == 0.05 and groups["no_decay"]["weight_decay"] == 0.0
    assert list(groups["decay"]["betas"]) == [0.8, 0.9]
    assert "optimizer.lr: 0.004 -> 0.01" in caplog.text
    assert "optimizer.weight_decay: 0.1 -> 0.05" in caplog.text
    assert "from step 2" in caplog.text


def test_an_unchanged_resume_keeps_the_checkpoint_settings_and_logs_nothing(trained: Path, tmp_path: Path,
                                                                            caplog) -> None:
    caplog.set_level(logging.INFO, logger="gptlab")
    ckpt = continued(trained, tmp_path)
    assert ckpt["lr_schedulers"][0]["base_lrs"] == [4e-3, 4e-3]
    assert "settings the checkpoint did not have" not in caplog.text


def test_every_checkpoint_callback_off_writes_no_checkpoint(tmp_path: Path) -> None:
    """Lightning adds its own ModelCheckpoint when none is configured: a full checkpoint under tensorboard/."""
    run_dir = tmp_path / "run"
    train_in_process(run_dir, *RUN, "trainer.max_steps=2", "callbacks.model_checkpoint=null",
                     "callbacks.periodic_checkpoint=null", "callbacks.preemption_checkpoint=null")
    assert (run_dir / "run_summary.json").is_file()
    assert sorted(run_dir.rglob("*.ckpt")) == []
