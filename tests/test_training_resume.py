"""Exact resume: a run stopped by SIGTERM, then by SIGKILL, and resumed each time logs the same train/loss,
bit for bit, at every step as the run that was never interrupted."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import load_checkpoint, run_tiny, scalars, train_in_process

from gptlab.data.windows import EpochSampler
from gptlab.errors import PreemptedError

# 6 batches per epoch, checkpoints every 4 steps and at validation every 5: the SIGTERM checkpoint (after
# step 5, i.e. 6 steps done) ends an epoch and the SIGKILL one (8 done, killed in step 9) is mid-epoch;
# dropout > 0 makes the RNG state matter.
RUN = [
    "model.dropout=0.1",
    "data.samples_per_epoch=24",
    "trainer.max_steps=16",
    "trainer.val_check_interval=5",
    "callbacks.periodic_checkpoint.every_n_train_steps=4",
]
KILLER = "+callbacks.killer._target_=helpers.KillAtStep"
LAYOUT = {"world_size": 1, "batch_size": 4, "accumulate": 1}  # TINY: one process, 4 windows, no accumulation


def test_sigterm_and_sigkill_then_resume_match_the_uninterrupted_run(tmp_path: Path) -> None:
    train_in_process(tmp_path / "ref", *RUN)
    reference = scalars(tmp_path / "ref")["train/loss"]
    assert sorted(reference) == list(range(16))
    run = tmp_path / "run"

    # SIGTERM (preemption) during step 5: the step finishes, a checkpoint is saved after it, the run stops.
    # In this process: gptlab's handler flags the signal; the step boundary saves and raises PreemptedError.
    with pytest.raises(PreemptedError, match="SIGTERM at step 6"):
        train_in_process(run, *RUN, KILLER, "+callbacks.killer.step=5", "+callbacks.killer.signal_name=SIGTERM")
    preempted = run / "checkpoints" / "preempted.ckpt"
    state = load_checkpoint(preempted)  # weights_only=True
    assert state["global_step"] == 6
    assert state["GPTDataModule"] == {"epoch": 0, "batches": 6, "layout": LAYOUT}  # the end of epoch 0
    assert all(math.isfinite(float(v.float().sum())) for v in state["state_dict"].values())

    # Resume from it, then SIGKILL during step 9: nothing is saved at the kill, last.ckpt is from step 8.
    killed = run_tiny(run, *RUN, f"ckpt_path={preempted}", KILLER, "+callbacks.killer.step=9", check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    last = load_checkpoint(run / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 8
    assert last["GPTDataModule"] == {"epoch": 1, "batches": 2, "layout": LAYOUT}  # mid-epoch
    resumed_once = scalars(run)["train/loss"]
    assert [resumed_once[s] for s in range(9)] == [reference[s] for s in range(9)]  # exact float equality

    # resume=auto picks the newest checkpoint of the run dir (last.ckpt, step 8) and finishes the run.
    train_in_process(run, *RUN, "resume=auto")
    resumed = scalars(run)["train/loss"]
    assert [resumed[s] for s in range(8, 16)] == [reference[s] for s in range(8, 16)]


def test_epoch_sampler_resumes_mid_epoch_per_rank() -> None:
    """Rank 1 of 2, epoch 1 of 12 samples, 2 of its samples already trained on: it continues with the rest."""
    sampler = EpochSampler(12, rank=1, world_size=2, epoch=1, start=2)
    assert list(sampler) == [17, 19, 21, 23]  # epoch 1 is 12..23; rank 1 has 13, 15, 17, ...
    assert len(sampler) == 6  # the full epoch, so Lightning's batch counters line up
    sampler.set_epoch(1)
    assert list(sampler) == [17, 19, 21, 23]  # setting the same epoch keeps the skip
    sampler.set_epoch(2)
    assert list(sampler) == [25, 27, 29, 31, 33, 35]  # the next epoch is whole
