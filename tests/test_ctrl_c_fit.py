"""Ctrl-C during trainer.fit (issue 46 case): Lightning answers a KeyboardInterrupt inside fit with its own
`sys.exit(1)`, so the run ended with exit 1 and Lightning's "attempting graceful shutdown" alone, saying neither that
nothing was saved nor how to go on. gptlab now says both and exits 130, as for a Ctrl-C outside the fit."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gptlab.apps import train as train_app


class InterruptedTrainer:
    """What Lightning's trainer does on Ctrl-C: marks itself interrupted and exits 1 from inside fit."""

    interrupted = False
    global_step = 7

    def fit(self, *args, **kwargs) -> None:
        self.interrupted = True
        sys.exit(1)


def interrupted_fit(output_dir: Path) -> str:
    run = SimpleNamespace(trainer=InterruptedTrainer(), callbacks=[], ckpt_path=None, module=None, datamodule=None)
    with pytest.raises(train_app.FitInterrupted) as err:
        train_app._fit(run, output_dir)
    assert isinstance(err.value, KeyboardInterrupt)  # gptlab.launch.cli prints it and exits 130
    return err.value.words


def test_ctrl_c_in_a_fit_says_how_to_go_on(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["src/train.py", "trainer.max_steps=200", f"hydra.run.dir={tmp_path}"])
    words = interrupted_fit(tmp_path)
    assert words.startswith("at step 7, without a save") and "run the same command again to start over" in words
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")
    words = interrupted_fit(tmp_path)
    assert f"continue with python src/train.py trainer.max_steps=200 resume=auto hydra.run.dir={tmp_path}" in words


def test_another_exit_inside_fit_is_left_alone(tmp_path: Path) -> None:
    class Exiting(InterruptedTrainer):
        def fit(self, *args, **kwargs) -> None:
            sys.exit(3)

    run = SimpleNamespace(trainer=Exiting(), callbacks=[], ckpt_path=None, module=None, datamodule=None)
    with pytest.raises(SystemExit) as err:
        train_app._fit(run, tmp_path)
    assert err.value.code == 3
