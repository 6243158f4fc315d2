"""The Hydra callback that decides, before Hydra creates or writes the run dir, whether a run may use it.

Hydra makes `hydra.run.dir` and writes `.hydra/` and the job log before `train()` sees the config, so every
refusal made in `train()` used to leave a run dir behind (or, in a dir given with `hydra.run.dir`, overwrite the
earlier run's `.hydra/`). `on_run_start` runs before all of that, in this order:
1. the config and machine checks (gptlab.preflight.early_checks): a refusal there creates nothing at all;
2. the run dir's lock (gptlab.runs.run_dir_lock): a second run into a dir in use is refused, naming the holder;
3. what the dir holds (gptlab.runs.resume): a finished run is left as it was (exit 0), unreadable checkpoints or
   an earlier run without resume=auto/restart are refused; what step 2 created is removed again, and said.
In a dir that exists already, the checks of step 1 that import Lightning (early_checks.check_to_train: the _target_
lookups, the checkpoints' disk space) come after step 3, so that its answers take no Lightning import.
A sweep holds its sweep dir's lock for the whole sweep instead (its jobs run in this process or under it).
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write

from gptlab.errors import ConfigError, find_config_error
from gptlab.launch.cli import refuse
from gptlab.runs.run_dir import first_missing, note_origin, owns_run_dir, remove_created, say_removed
from gptlab.runs.run_dir_lock import LOCK_FILE, lock_run_dir, release


def _refuse(err: BaseException) -> NoReturn:
    refuse(find_config_error(err))


def _task_config(config: DictConfig, run_dir: Path) -> DictConfig:
    """The config train() will get, resolvable before Hydra's run_job sets it up (the same two steps it takes:
    the runtime output dir, then HydraConfig, which `${hydra:...}` interpolations read)."""
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = str(run_dir)
    HydraConfig.instance().set_config(config)
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task


def hold_run_dir(run_dir: Path) -> int:
    """Make the run dir and take its lock before Hydra writes into it; refused in one line when another run holds it.
    What this creates is noted, so an early refusal removes it again (runs.run_dir.remove_created)."""
    created_from, lock_existed = first_missing(run_dir), (run_dir / LOCK_FILE).exists()
    run_dir.mkdir(parents=True, exist_ok=True)  # writable_dir said it can be made
    try:
        lock = lock_run_dir(run_dir)
    except ConfigError as err:  # held by another run: what is in the dir is that run's, nothing is removed
        _refuse(err)
    note_origin(run_dir, created_from, ignore=() if lock_existed else (LOCK_FILE,))
    return lock


class HoldRunDir(Callback):
    """One process writes a run (or sweep) dir at a time: eval.py's, whose eval.json, .hydra/ and eval.log two
    evaluations into one hydra.run.dir would mix (or an evaluation into a run dir that is training)."""

    def __init__(self) -> None:
        self._lock: Optional[int] = None

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not owns_run_dir():
            return
        from gptlab.config.ranges import writable_dir

        try:
            writable_dir("hydra.run.dir", config.hydra.run.dir)
        except ConfigError as err:
            _refuse(err)
        self._lock = hold_run_dir(Path(os.path.abspath(config.hydra.run.dir)))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._lock is not None:
            release(self._lock)
            self._lock = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not owns_run_dir():
            return
        from gptlab.config.ranges import writable_dir

        sweep_dir = Path(os.path.abspath(config.hydra.sweep.dir))
        try:
            writable_dir("hydra.sweep.dir", config.hydra.sweep.dir)
            sweep_dir.mkdir(parents=True, exist_ok=True)  # Hydra's launcher makes it next
            self._lock = lock_run_dir(sweep_dir, field="hydra.sweep.dir")
        except ConfigError as err:
            _refuse(err)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.on_run_end(config)


class GuardRunDir(HoldRunDir):
    """train.py's: the checks of the module docstring, then the lock."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not owns_run_dir():  # a DDP rank > 0 joins the dir its rank 0 holds and checked
            return
        from gptlab.config.ranges import writable_dir
        from gptlab.preflight.early_checks import check_before_run
        from gptlab.runs.resume import continuation
        from gptlab.runs.sweep_jobs import check_sweep_is_multirun

        run_dir = Path(os.path.abspath(config.hydra.run.dir))
        task = _task_config(config, run_dir)
        try:
            check_sweep_is_multirun(config)  # on_run_start: Hydra runs this config as one job
            writable_dir("hydra.run.dir", config.hydra.run.dir)  # as CheckOutputDir, which may run after this
            # A dir that exists may hold a finished run, answered before the checks that import Lightning (seconds);
            # a new one is checked in full before it is made, so that a refusal leaves nothing behind.
            fresh = not run_dir.exists() or bool(task.trainer.get("fast_dev_run"))
            checked = check_before_run(task, trains=fresh)
        except Exception as err:
            if find_config_error(err) is None:
                raise
            _refuse(err)
        if task.trainer.get("fast_dev_run"):  # writes nothing (conf/debug/fast_dev_run.yaml): nothing to hold
            return
        self._lock = hold_run_dir(run_dir)
        log_file = f"{config.hydra.job.name}.log"
        try:
            # train() names the checkpoints it skips in its log
            finished = continuation(task, run_dir, checked.given, checked.model_cfg, checked.fsdp, warn=False,
                                    bound=checked.bound).finished
            if finished is None and not fresh:  # it will train
                check_before_run(task)
        except Exception as err:
            if find_config_error(err) is None:
                raise
            say_removed(remove_created(run_dir, log_file))
            _refuse(err)
        if finished is not None:
            say_removed(remove_created(run_dir, log_file))
            print(f"gptlab: {finished.message(run_dir)}", flush=True)
            sys.exit(0)
