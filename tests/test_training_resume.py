"""Exact resume: a run stopped by SIGTERM, then by SIGKILL, and resumed each time logs the same train/loss,
bit for bit, at every step as the run that was never interrupted."""

from __future__ import annotations

import math
from pathlib import Path
from unittest.mock import ANY

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
    assert sorted(reference) == list(range(1, 17))  # at the steps done
    run = tmp_path / "run"

    # SIGTERM (preemption) during step 5: the step finishes, a checkpoint is saved after it, the run stops.
    # In this process: gptlab's handler flags the signal; the step boundary saves and raises PreemptedError.
    with pytest.raises(PreemptedError, match="SIGTERM at step 6"):
        train_in_process(run, *RUN, KILLER, "+callbacks.killer.step=5", "+callbacks.killer.signal_name=SIGTERM")
    preempted = run / "checkpoints" / "last.ckpt"  # the preemption save replaces last.ckpt
    state = load_checkpoint(preempted)  # weights_only=True
    assert state["global_step"] == 6
    assert state["GPTDataModule"] == {"epoch": 0, "windows": 24, "epoch_windows": 24, "layout": LAYOUT,
                                      "data": ANY}  # its end; "data": what the train tokens are
    assert all(math.isfinite(float(v.float().sum())) for v in state["state_dict"].values())

    # Resume from it, then SIGKILL during step 9: nothing is saved at the kill, last.ckpt is from step 8.
    killed = run_tiny(run, *RUN, f"ckpt_path={preempted}", KILLER, "+callbacks.killer.step=9", check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    last = load_checkpoint(run / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 8
    assert last["GPTDataModule"] == {"epoch": 1, "windows": 8, "epoch_windows": 24, "layout": LAYOUT,
                                     "data": ANY}  # mid-epoch
    resumed_once = scalars(run)["train/loss"]
    assert [resumed_once[s] for s in range(1, 10)] == [reference[s] for s in range(1, 10)]  # exact float equality

    # resume=auto picks the newest checkpoint of the run dir (last.ckpt, step 8) and finishes the run.
    train_in_process(run, *RUN, "resume=auto")
    resumed = scalars(run)["train/loss"]
    assert [resumed[s] for s in range(9, 17)] == [reference[s] for s in range(9, 17)]


def test_epoch_sampler_resumes_mid_epoch_per_rank() -> None:
    """Rank 1 of 2, epoch 1 of 12 samples, the first 4 of the epoch (2 per rank) already trained on: it continues
    with the rest of its share."""
    sampler = EpochSampler(12, rank=1, world_size=2, epoch=1, start=4)
    assert list(sampler) == [17, 19, 21, 23]  # epoch 1 is 12..23; rank 1 has 13, 15, 17, ...
    assert len(sampler) == 6  # the full epoch, so Lightning's batch counters line up
    sampler.set_epoch(1)
    assert list(sampler) == [17, 19, 21, 23]  # setting the same epoch keeps the skip
    sampler.set_epoch(2)
    assert list(sampler) == [25, 27, 29, 31, 33, 35]  # the next epoch is whole


def test_a_resumed_sampler_keeps_its_epoch_whatever_lightning_numbers_it() -> None:
    """A run trained further from its final checkpoint: Lightning counts the epoch cut by max_steps as done and
    starts "epoch 1", but the data position is 8 windows into epoch 0, and that is where the data continues."""
    sampler = EpochSampler(12, epoch=0, start=8)
    sampler.resumed = True
    sampler.set_epoch(1)
    assert list(sampler) == [8, 9, 10, 11]
    sampler.set_epoch(2)  # Lightning's next epoch is the data's next one
    assert list(sampler) == list(range(12, 24))


def test_an_epoch_uses_whole_optimizer_steps() -> None:
    """25 windows, steps of 8 (2 ranks x 4 windows, say): the epoch uses 24 on every split of the step, so no
    step is short and the epoch ends at the same window on any number of ranks."""
    for world in (1, 2, 4, 8):
        samplers = [EpochSampler(25, rank, world, step_windows=8) for rank in range(world)]
        assert sorted(i for s in samplers for i in s) == list(range(24))
        assert {len(s) for s in samplers} == {24 // world}
