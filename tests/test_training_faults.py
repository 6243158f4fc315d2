"""Faults: a NaN loss stops the run naming the step and keeps the last good checkpoint; an unwritable or too
small output dir fails before training starts."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from helpers import compose_tiny, load_checkpoint, train_in_process

from gptlab.errors import ConfigError, NonFiniteLossError
from gptlab.launch.cli import user_errors_exit
from gptlab.preflight.checkpoint_plan import check_checkpoint_space
from gptlab.preflight.output_dirs import check_output_dirs


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    overrides = [
        "trainer.max_steps=20",
        "trainer.val_check_interval=100",
        "callbacks.periodic_checkpoint.every_n_train_steps=3",
        "+callbacks.nan._target_=helpers.InjectNaN",
        "+callbacks.nan.step=7",
    ]
    with pytest.raises(NonFiniteLossError, match="train/loss is nan at step 8 ") as caught:
        train_in_process(tmp_path, *overrides)
    last = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 6  # the checkpoint before the fault, untouched by it
    assert all(math.isfinite(float(v.float().sum())) for v in last["state_dict"].values())

    # What src/train.py's wrapper makes of it: the message and exit code 1, no traceback.
    def entry() -> None:
        raise caught.value

    with pytest.raises(SystemExit) as exited:
        user_errors_exit(entry)()
    assert exited.value.code == 1


def test_unwritable_output_dir_fails_before_training(tmp_path: Path) -> None:
    # A file where the checkpoint dir should be: mkdir fails even for root, which ignores permission bits.
    (tmp_path / "checkpoints").write_text("not a directory")
    with pytest.raises(ConfigError, match=f"cannot write to output dir {tmp_path / 'checkpoints'}"):
        train_in_process(tmp_path, "trainer.max_steps=5")
    assert not (tmp_path / "tensorboard").exists()  # nothing was trained or logged


def test_too_little_disk_space_is_reported_with_the_numbers(tmp_path: Path, monkeypatch) -> None:
    callbacks = compose_tiny(tmp_path).callbacks
    with pytest.raises(ConfigError, match=rf"checkpoint dir {tmp_path}/checkpoints has .* GiB free but the checkpoints "
                                          r".* need about 12,884,901,888.00 GiB"):
        check_checkpoint_space(callbacks, checkpoint_size=2**62)
    # Below 1 GB the numbers come in MB, where a user freeing space needs the precision.
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=300 * 2**20))
    with pytest.raises(ConfigError, match=r"has 300.0 MB free but .* need about 384.0 MB"):
        check_checkpoint_space(callbacks, checkpoint_size=128 * 2**20)
    monkeypatch.undo()
    check_output_dirs(tmp_path / "new", [tmp_path / "new" / "c"])  # creates them
    assert (tmp_path / "new" / "c").is_dir()
