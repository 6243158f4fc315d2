"""A preemption during callbacks.zero_shot's evaluation stops it before its next scoring batch and saves at that
step (before: after the whole evaluation and one more step), and a resume scores that step first: the run's
train/loss, val/loss and zero_shot/ metrics equal those of the run never interrupted. Signals are aimed by events
(a scoring batch begins, a step begins), in this process."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, load_checkpoint, scalars, train_in_process

from gptlab.errors import PreemptedError
from gptlab.eval import scoring

LAMBADA = ROOT / "tests" / "fixtures" / "zeroshot" / "lambada.jsonl"
# 5 LAMBADA passages in batches of 2 (3 scoring batches) at steps 2, 4 and 6; one validation, the final one.
RUN = ["model.block_size=128", "model.dropout=0.1", "trainer.max_steps=6", "trainer.val_check_interval=6",
       "callbacks.zero_shot.tasks=[lambada]", "callbacks.zero_shot.every_n_steps=2", "callbacks.zero_shot.limit=5",
       "callbacks.zero_shot.batch_size=2", f"callbacks.zero_shot.data.lambada={LAMBADA}"]


def _sigterm_at_scoring_batch(monkeypatch: pytest.MonkeyPatch, aimed: int) -> list[int]:
    """Sends SIGTERM as scoring batch `aimed` (1-based) of the first evaluation begins; returns the batches begun."""
    begun: list[int] = []
    original = scoring.score_pairs

    def score_pairs(model: Any, pairs: Any, batch_size: int = 16, before_batch: Any = None) -> Any:
        def hook() -> None:
            begun.append(len(begun) + 1)
            if len(begun) == aimed:
                os.kill(os.getpid(), signal.SIGTERM)
            if before_batch is not None:
                before_batch()

        if before_batch is None:  # a scorer without the hook: the signal comes as the evaluation begins
            hook()
            return original(model, pairs, batch_size)
        return original(model, pairs, batch_size, hook)

    monkeypatch.setattr(scoring, "score_pairs", score_pairs)
    return begun


def test_sigterm_in_a_zero_shot_evaluation_stops_it_saves_that_step_and_the_resume_scores_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    train_in_process(tmp_path / "ref", *RUN)
    reference = scalars(tmp_path / "ref")
    assert sorted(reference["zero_shot/lambada/ppl"]) == [2, 4, 6] and sorted(reference["val/loss"]) == [6]
    run = tmp_path / "run"

    with monkeypatch.context() as patch:
        begun = _sigterm_at_scoring_batch(patch, aimed=2)
        with caplog.at_level(logging.WARNING), pytest.raises(PreemptedError, match="SIGTERM at step 2;"):
            train_in_process(run, *RUN)
    assert len(begun) == 2  # the second batch was not scored, nor any after it
    assert "the evaluation at step 2 was cut by SIGTERM after 1 scoring batch" in caplog.text
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 2
    assert "zero_shot/lambada/ppl" not in scalars(run)  # abandoned: nothing logged

    # SIGTERM while step 4 is computed: PreemptionCheckpoint saves at step 4 before step 4's evaluation begins.
    with pytest.raises(PreemptedError, match="SIGTERM at step 4;"):
        train_in_process(run, *RUN, "resume=auto", "+callbacks.killer._target_=helpers.KillAtStep",
                         "+callbacks.killer.step=3", "+callbacks.killer.signal_name=SIGTERM")
    assert sorted(scalars(run)["zero_shot/lambada/ppl"]) == [2]  # step 2 scored first thing on resume

    train_in_process(run, *RUN, "resume=auto")
    resumed = scalars(run)
    for tag in ("train/loss", "val/loss", "zero_shot/lambada/ppl", "zero_shot/lambada/acc"):
        assert resumed[tag] == reference[tag], tag  # exact float equality at every step


def test_a_zero_shot_evaluation_cut_at_the_last_step_runs_on_resume_before_the_final_validation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    last = [*RUN, "trainer.max_steps=2", "trainer.val_check_interval=2"]
    train_in_process(tmp_path / "ref", *last)
    reference = scalars(tmp_path / "ref")
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        _sigterm_at_scoring_batch(patch, aimed=2)
        with pytest.raises(PreemptedError, match="SIGTERM at step 2;"):  # saved as the final validation begins
            train_in_process(run, *last)
    assert "val/loss" not in scalars(run) and "zero_shot/lambada/ppl" not in scalars(run)
    train_in_process(run, *last, "resume=auto")  # Lightning's fit does nothing at max_steps; gptlab runs both after
    resumed = scalars(run)
    for tag in ("val/loss", "zero_shot/lambada/ppl", "zero_shot/lambada/acc"):
        assert resumed[tag] == reference[tag], tag
