"""A preemption during a validation (interval, final, sanity check) stops it at the next validation batch instead of
after it, and a resume runs that validation again: the run's train/loss and val/loss equal, bit for bit, those of the
run never interrupted. The signals are aimed by events (a validation batch begins), in this process."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from helpers import load_checkpoint, scalar_steps, scalars, train_in_process

from gptlab.errors import PreemptedError, StoppedBySignal

# 6 batches an epoch, validations of 3 batches after steps 3, 6 and 8 (the final one); dropout makes the RNG matter.
RUN = ["model.dropout=0.1", "data.samples_per_epoch=24", "trainer.max_steps=8", "trainer.val_check_interval=3",
       "trainer.limit_val_batches=3", "callbacks.periodic_checkpoint.every_n_train_steps=4"]


def _in_validation(step: int, batch: int = 0, sanity: bool = False) -> list[str]:
    return ["+callbacks.killer._target_=helpers.SignalInValidation", f"+callbacks.killer.step={step}",
            f"+callbacks.killer.batch={batch}", f"+callbacks.killer.sanity={str(sanity).lower()}"]


def test_a_validation_cut_by_sigterm_is_run_again_on_resume_and_the_run_stays_bit_identical(tmp_path: Path) -> None:
    train_in_process(tmp_path / "ref", *RUN)
    reference = scalars(tmp_path / "ref")
    assert sorted(reference["val/loss"]) == [3, 6, 8]
    run = tmp_path / "run"

    # SIGTERM as the first batch of step 3's validation begins: stopped as the second begins, saved at step 3.
    with pytest.raises(PreemptedError, match="SIGTERM at step 3;"):
        train_in_process(run, *RUN, *_in_validation(step=3))
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 3
    assert "val/loss" not in scalars(run)  # the validation was cut: it logged nothing

    # SIGTERM during step 6, which a validation follows: saved at step 6, that validation marked to run on resume.
    with pytest.raises(PreemptedError, match="SIGTERM at step 6;"):
        train_in_process(run, *RUN, "resume=auto", "+callbacks.killer._target_=helpers.KillAtStep",
                         "+callbacks.killer.step=5", "+callbacks.killer.signal_name=SIGTERM")

    train_in_process(run, *RUN, "resume=auto")
    resumed = scalars(run)
    assert resumed["train/loss"] == reference["train/loss"]  # exact float equality at every step
    assert resumed["val/loss"] == reference["val/loss"]  # steps 3 and 6 validated once each, on resume
    summaries = [json.loads((d / "run_summary.json").read_text()) for d in (tmp_path / "ref", run)]
    assert summaries[0]["best_val_loss"] == summaries[1]["best_val_loss"]


def test_sigterm_in_the_final_validation_saves_the_last_step_and_its_resume_runs_it_after_the_fit(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    short = [*RUN, "trainer.max_steps=5"]  # validations after steps 3 and 5 (the final one)
    train_in_process(tmp_path / "ref", *short)
    reference = scalars(tmp_path / "ref")
    run = tmp_path / "run"
    with pytest.raises(PreemptedError, match="SIGTERM at step 5;"):  # before: the run ended "finished", signal lost
        train_in_process(run, *short, *_in_validation(step=5))
    assert not (run / "run_summary.json").exists()
    assert sorted(scalars(run)["val/loss"]) == [3]
    with caplog.at_level(logging.WARNING):
        train_in_process(run, *short, "resume=auto")
    assert "the final validation at step 5, cut short by a preemption, runs now" in caplog.text
    assert scalars(run)["val/loss"] == reference["val/loss"]  # step 5's, once, bit for bit
    summaries = [json.loads((d / "run_summary.json").read_text()) for d in (tmp_path / "ref", run)]
    for key in ("best_val_loss", "final_val_loss", "global_step"):
        assert summaries[0][key] == summaries[1][key], key


def test_a_validation_run_again_on_resume_leaves_later_checkpoints_whole(tmp_path: Path) -> None:
    """Once a cut validation has run again, a later checkpoint of that epoch read as cut too (Lightning's restart
    left its total counters one batch ahead): continuing the finished run validated its last step (an interval's) a
    second time, and logged a second val/loss there."""
    run, short = tmp_path / "run", [*RUN, "data.samples_per_epoch=48", "trainer.max_steps=6"]  # one epoch
    with pytest.raises(PreemptedError, match="SIGTERM at step 3;"):
        train_in_process(run, *short, *_in_validation(step=3))
    train_in_process(run, *short, "resume=auto")
    train_in_process(run, *short, "resume=auto", "trainer.max_steps=7")
    assert scalar_steps(run, "val/loss") == [3, 6, 7]


def test_sigterm_in_the_sanity_check_stops_before_training_and_saves_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(StoppedBySignal, match="SIGTERM while running the sanity-check validation"):
        train_in_process(run, *RUN, "trainer.num_sanity_val_steps=2", *_in_validation(step=0, sanity=True))
    assert not list(run.glob("checkpoints/*.ckpt"))  # no step was taken: nothing to save
