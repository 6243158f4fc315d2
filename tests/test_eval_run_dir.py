"""Two evaluations into one run dir (hydra.run.dir), or one into a run dir a training holds, are refused in one
line naming the holder, before anything is written there (issue 46 item 2): their eval.json, .hydra/ and eval.log
would mix. eval.py's Hydra callback HoldRunDir, run on the config `python src/eval.py` composes, in this process."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from helpers import CONF_DIR
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import DictConfig

from gptlab.launch.run_dir_guard import HoldRunDir
from gptlab.runs.run_dir_lock import LOCK_FILE, lock_run_dir, release


def eval_config(run_dir: Path) -> DictConfig:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return GlobalHydra.instance().hydra.compose_config(
                "eval", ["ckpt_path=some.ckpt", f"hydra.run.dir={run_dir}"], run_mode=RunMode.RUN)
    finally:
        GlobalHydra.instance().clear()


def held_callback(config: DictConfig) -> HoldRunDir:
    """eval.yaml's callback, as Hydra builds it from the config."""
    from hydra.utils import instantiate

    return instantiate(config.hydra.callbacks.hold_run_dir)


def test_a_second_evaluation_into_one_run_dir_is_refused_in_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "eval"
    config = eval_config(run_dir)
    first = held_callback(config)
    first.on_run_start(config)
    (run_dir / "eval.json").write_text("{}")  # the first evaluation's result
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stopped:
        held_callback(config).on_run_start(config)
    assert stopped.value.code == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gptlab: error: hydra.run.dir={str(run_dir)!r} is in use by "
                                                   "another run (pid "), lines
    assert (run_dir / "eval.json").read_text() == "{}"
    first.on_run_end(config)
    assert not (run_dir / LOCK_FILE).exists()
    again = held_callback(config)  # the way out: wait for it to end
    again.on_run_start(config)
    again.on_run_end(config)


def test_an_evaluation_into_a_training_run_dir_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    training = lock_run_dir(run_dir)  # train's GuardRunDir holds the same lock
    config = eval_config(run_dir)
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        held_callback(config).on_run_start(config)
    release(training)
