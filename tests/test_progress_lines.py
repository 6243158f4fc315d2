"""The step bar where stderr is not a terminal (a log file, a scheduler's output, a fused sweep's members side by
side): plain lines, one per redraw, with no carriage return or cursor move (issue 54)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import torch

from gptlab.train.callbacks.progress import StepProgressBar


def test_a_bar_into_a_log_is_plain_lines(capsys) -> None:
    bar = StepProgressBar(refresh_rate=2)
    trainer = SimpleNamespace(is_global_zero=True, global_step=0, max_steps=4, sanity_checking=False,
                              callback_metrics={"val/loss": torch.tensor(2.5)})
    module = SimpleNamespace(tokens_per_step=128)
    bar.on_train_start(trainer, module)
    for step in range(1, 5):
        trainer.global_step = step
        bar.on_train_batch_end(trainer, module, {"train_loss": torch.tensor(3.0 / step)})
    bar.on_validation_end(trainer, module)
    bar.on_train_end(trainer, module)
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err, repr(err)
    lines = err.splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["train: step 2/4", "train: step 4/4", "train: step 4/4"], lines
    assert "loss=1.500" in lines[0] and "tok/s=" in lines[0] and "val=2.500" in lines[2]
    assert re.search(r" \| \d\d:\d\d<\d\d:\d\d$", lines[0]), lines[0]  # elapsed<remaining, as tqdm
