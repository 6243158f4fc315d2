"""What a run does with the run dir it is given: continue it, start it, or refuse. A run never trains from step 0
over the records of an earlier one without being asked to, and never rewrites a finished one.

`resume` values (conf/train.yaml):
- null: a new run. Refused in a dir that already holds checkpoints (continue it with auto, or restart it).
- auto: continue from the newest checkpoint that loads and holds more than the weights; start fresh where none was
  saved yet. Refused where no checkpoint can be continued (each named with why). A run whose newest checkpoint
  already reached trainer.max_steps is finished: nothing is run and no file is touched.
- restart: start over from step 0 in this dir; the earlier run's checkpoints, summary and TensorBoard events are
  deleted first (and named), so its records and the new ones never mix.
Whatever `resume` says, a dir that holds a sweep or another run's dir is refused (gptlab.runs.one_run): nothing in
it is searched, continued or deleted.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from gptlab.atomic import remove
from gptlab.checkpoint.reader import (
    check_resumable,
    continue_problem,
    read_checkpoint,
    resolve_checkpoint,
    run_checkpoints,
)
from gptlab.checkpoint.sharded import is_sharded
from gptlab.config.budget import Budget
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.runs import sweep_jobs
from gptlab.runs.hydra_value import hydra_value
from gptlab.runs.one_run import check_one_run
from gptlab.runs.run_dir import SUMMARY_FILE, event_files

log = logging.getLogger(__name__)


def resume_mode(cfg: DictConfig) -> Optional[str]:
    """The run's `resume` (its values and ckpt_path beside it are config rules: gptlab.config): a sweep job behaves
    as resume=auto, so a sweep launched again continues its jobs."""
    resume = cfg.get("resume")
    if resume is None and cfg.get("ckpt_path") is None and sweep_jobs.in_sweep_job():
        return "auto"
    return resume


def _unreadable_message(output_dir: Path, problems: list[tuple[Path, str]]) -> str:
    listed = "; ".join(f"{path}: {why}" for path, why in problems)
    return (f"resume=auto: no checkpoint in {output_dir} can be continued ({listed}). Nothing was trained over them. "
            "To start over in this dir (deleting them) pass resume=restart; to continue from a copy, give "
            "ckpt_path=<a readable .ckpt> and a new hydra.run.dir.")


def given_checkpoint(ckpt_path: Optional[str]) -> Optional[str]:
    """The checkpoint `ckpt_path` names (a file, or a run dir's newest readable one); None without ckpt_path."""
    if ckpt_path is None:
        return None
    path = resolve_checkpoint(ckpt_path)
    if not path.is_file() and not is_sharded(path):
        raise ConfigError(f"ckpt_path={ckpt_path!r} is not a file; give a .ckpt written by a gptlab run (or its run "
                          "dir), or leave ckpt_path out to start from step 0.")
    return str(path)


def named_run_dir(output_dir: Path) -> str:
    """The run dir as a message names it: as the user's hydra.run.dir when they gave it."""
    return f"hydra.run.dir={str(output_dir)!r}" if run_dir_given() else f"the run dir {output_dir}"


def run_dir_given() -> bool:
    """Whether the user set hydra.run.dir (on the command line), so a message may name it as theirs."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return True  # no Hydra launch (a test, the compose API): the caller gave the dir
    return any(o.split("=", 1)[0].lstrip("+~") == "hydra.run.dir" for o in HydraConfig.get().overrides.hydra)


def resume_checkpoint(cfg: DictConfig, output_dir: Path, warn: bool = True) -> Optional[str]:
    """`ckpt_path=<file>`, or with `resume=auto` the newest checkpoint in this run dir that loads (None: start
    fresh), not checked against a model."""
    given = given_checkpoint(cfg.get("ckpt_path"))
    return given if given is not None else checkpoint_in_run_dir(cfg, output_dir, resume_mode(cfg), warn)


def checkpoint_in_run_dir(cfg: DictConfig, output_dir: Path, resume: Optional[str], warn: bool) -> Optional[str]:
    """With `resume=auto` the newest checkpoint in this run dir that loads (None: start fresh); refuses a dir that
    holds a run when `resume` is null, or whose checkpoints all fail to load. `warn`: name each newer checkpoint
    skipped because it does not load."""
    # fast_dev_run's run dir is the launch dir (conf/debug/fast_dev_run.yaml): no run there
    if (cfg.get("trainer") or {}).get("fast_dev_run"):
        if resume is not None:
            log.info("resume=%s: debug=fast_dev_run writes no run to continue or restart; one batch from step 0",
                     resume)
        return None
    found = run_checkpoints(output_dir)
    if resume == "restart" or not found:
        return None
    if resume is None:
        new_dir = "leave hydra.run.dir out" if run_dir_given() else "give another hydra.run.dir"
        raise ConfigError(
            f"{named_run_dir(output_dir)} already holds a run ({len(found)} checkpoint(s), newest {found[0]}); "
            "continue it with resume=auto, start over in it with resume=restart (deletes its checkpoints, summary "
            f"and TensorBoard events), or {new_dir} for a new run dir."
        )
    problems = []
    for path in found:
        problem = continue_problem(path)
        if problem is None:
            for skipped, why in problems if warn else ():
                log.warning("skipping checkpoint %s: %s", skipped, why)
            return str(path)
        problems.append((path, problem))
    raise ConfigError(_unreadable_message(output_dir, problems))


@dataclass
class Finished:
    """A run that ended normally at trainer.max_steps (its summary says so) and whose newest checkpoint is there too:
    continuing it would train nothing and only rewrite its summary."""
    checkpoint: str
    step: int
    max_steps: int
    best_val_loss: Optional[float]
    bound: Optional[Budget] = None  # the budget= that set its length (gptlab.config.budget)

    def message(self, output_dir: Path) -> str:
        best = "" if self.best_val_loss is None else f", best val/loss {self.best_val_loss:.4f}"
        if self.bound is None:
            end, raise_it = f"step {self.step} of trainer.max_steps={self.max_steps}", \
                f"raise trainer.max_steps past step {self.step}"
        else:
            end, raise_it = f"step {self.step}, the end of budget={self.bound}", "raise its budget"
        return (f"{output_dir} is finished: its newest checkpoint ({self.checkpoint}) is at {end}{best}; nothing was "
                f"run and its files were left as they were. To train it further, {raise_it}, e.g. "
                f"{self.further_command(output_dir)}")

    def further_command(self, output_dir: Path) -> str:
        """The command that trains it further: the user's own overrides (its model, data, ... as typed), with a
        trainer.max_steps past the checkpoint's step. Issue 46: the words used to suggest twice the max_steps asked
        (a smaller one than done stayed finished) and dropped the overrides (typed, the model did not match)."""
        import shlex
        import sys

        from hydra.core.hydra_config import HydraConfig

        longer = f"trainer.max_steps={2 * max(self.step, self.max_steps, 1)}" if self.bound is None else \
            f"budget={Budget(self.bound.kind, 2 * self.bound.amount)}"
        further = [longer, "resume=auto", f"hydra.run.dir={hydra_value(str(output_dir))}"]
        if not HydraConfig.initialized():  # train() called without a command line: the keys alone
            return " ".join(further)
        kept = [a for a in sys.argv[1:] if not a.lstrip("+").startswith(
            ("hydra.run.dir=", "resume=", "ckpt_path=", "trainer.max_steps=", "budget="))]
        return shlex.join(["python", sys.argv[0], *kept, *further])


def finished_run(cfg: DictConfig, output_dir: Path, ckpt_path: Optional[str], mode: Optional[str],
                 bound: Optional[Budget] = None) -> Optional[Finished]:
    """Whether `resume=auto` would continue a finished run. A run killed after its last checkpoint but before its
    summary is not finished: continuing it runs the final validation and writes the summary."""
    max_steps = cfg.trainer.get("max_steps", -1)
    summary_file = output_dir / SUMMARY_FILE
    if mode != "auto" or ckpt_path is None or max_steps is None or max_steps < 0 \
            or not summary_file.is_file():
        return None
    summary: dict[str, Any] = json.loads(summary_file.read_text())
    step = int(read_checkpoint(ckpt_path, mmap=True).get("global_step", 0))
    if bound is not None and bound.kind == "seconds":  # its steps are what the seconds bought
        if step < summary.get("global_step", 0) or summary.get("train_seconds", 0.0) < bound.amount:
            return None
    elif min(step, summary.get("global_step", 0)) < max_steps:
        return None
    return Finished(ckpt_path, step, max_steps, summary.get("best_val_loss"), bound)


@dataclass(frozen=True)
class Continuation:
    """Where a run starts, decided once by `continuation` (for train() and for the Hydra callback GuardRunDir)."""
    mode: Optional[str]  # resume_mode
    ckpt_path: Optional[str]  # the checkpoint it continues (None: from step 0)
    finished: Optional[Finished]  # resume=auto on a finished run: nothing is to be run


def continuation(cfg: DictConfig, output_dir: Path, given: Optional[str], model_cfg: GPTConfig, fsdp: bool,
                 warn: bool = True, bound: Optional[Budget] = None) -> Continuation:
    """The checkpoint this run continues: `given` (ckpt_path's, already checked against the model by the preflight
    pass), or with resume=auto the newest one in the run dir that loads, checked against `model_cfg` here (`fsdp`:
    the run can load a sharded one; `bound`: the budget= that set its length). Raises ConfigError for the runs it
    refuses (see the module docstring)."""
    mode = resume_mode(cfg)
    if not (cfg.get("trainer") or {}).get("fast_dev_run"):  # fast_dev_run writes nothing into its dir
        check_one_run(output_dir, named_run_dir(output_dir))
    ckpt_path = given if given is not None else checkpoint_in_run_dir(cfg, output_dir, mode, warn)
    if ckpt_path is not None and given is None:
        check_resumable(ckpt_path, model_cfg, fsdp, cfg.optimizer.get("_target_"), found_in_run_dir=True)
    return Continuation(mode, ckpt_path, finished_run(cfg, output_dir, ckpt_path, mode, bound))


def start_over(mode: Optional[str], output_dir: Path) -> list[Path]:
    """With resume=restart (`mode`, as `continuation` decided it), deletes the earlier run's checkpoints, summary
    and event files; returns them. Only in a dir of one run: they are then that run's."""
    if mode != "restart" or not output_dir.is_dir():
        return []
    check_one_run(output_dir, named_run_dir(output_dir))
    old = [*run_checkpoints(output_dir), *event_files(output_dir), output_dir / SUMMARY_FILE]
    removed = [path for path in old if path.is_file() or is_sharded(path)]
    for path in removed:
        remove(path)  # a folder: a sharded checkpoint (trainer=fsdp)
    return removed
