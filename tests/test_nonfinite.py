"""The NaN/inf check: no host sync per step, yet the run still stops naming the first bad step, also
when no checkpoint or validation comes between the fault and the periodic check."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import scalars, train_in_process

from gptlab.errors import ConfigError, NonFiniteLossError
from gptlab.train.callbacks.nonfinite import NonFiniteLossCheck


def test_periodic_check_names_the_first_nonfinite_step(tmp_path: Path) -> None:
    overrides = [
        "trainer.max_steps=30",
        "trainer.val_check_interval=100",
        "callbacks.periodic_checkpoint=null",
        "callbacks.model_checkpoint=null",
        "nonfinite_check_every=5",
        "+callbacks.nan._target_=helpers.InjectNaN",
        "+callbacks.nan.step=7",
    ]
    with pytest.raises(NonFiniteLossError, match="train/loss is nan at step 8 ") as caught:
        train_in_process(tmp_path, *overrides)
    assert "Lower optimizer.lr" in str(caught.value)
    # Stopped by the check after step 10, not at the end of training (step 30).
    assert 7 <= max(scalars(tmp_path)["train/loss"]) <= 10


@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_bad_check_interval_names_the_field(value: object) -> None:
    with pytest.raises(ConfigError, match="nonfinite_check_every"):
        NonFiniteLossCheck(every=value)  # type: ignore[arg-type]


def test_first_nonfinite_loss_is_found_among_finite_ones_and_stays_found() -> None:
    check = NonFiniteLossCheck(every=10)
    assert check.first_nonfinite() == (-1, 0.0)  # nothing recorded yet
    for value in (2.0, 1.5):
        check.remember(0, torch.tensor(value))
    assert check.first_nonfinite() == (-1, 0.0)
    for value in (1.2, float("inf"), float("nan")):
        check.remember(0, torch.tensor(value))
    assert check.first_nonfinite() == (0, float("inf"))  # the first bad one, not the NaN
    check.remember(0, torch.tensor(1.0))
    assert check.first_nonfinite() == (0, float("inf"))  # later checks refuse too, e.g. a checkpoint on the way out
