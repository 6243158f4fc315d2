"""A run dir holds one run. A dir that holds a sweep (its sweep_config.json, Hydra's multirun.yaml) or another run's
dir (a sweep's job dirs, a checkout's outputs/ under `hydra.run.dir=.`) is refused whatever `resume` says: a run
there would look for its checkpoints among the other runs' files, continue one of theirs, and with resume=restart
delete them all. Only the run's own files count as its own: the setup entries at the top of its dir."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from gptlab.checkpoint.dirs import CHECKPOINTS_DIR
from gptlab.errors import ConfigError
from gptlab.runs.run_dir import FAILURE_FILE, RESOLVED_CONFIG, SETUP_ENTRIES, SUMMARY_FILE, SWEEP_CONFIG

SWEEP_FILES = (SWEEP_CONFIG, "multirun.yaml")  # gptlab's and Hydra's record of a sweep, at the top of its dir
RUN_FILES = (".hydra", RESOLVED_CONFIG, SUMMARY_FILE, FAILURE_FILE)  # what each run or sweep job leaves in its dir
NOT_SEARCHED = {".git"}


def other_run(run_dir: Path) -> Optional[Path]:
    """The first sign that `run_dir` holds more than one run: a sweep file at its top, or a dir below it that holds
    a run's or a sweep's files (None: it holds one run at most)."""
    for name in SWEEP_FILES:
        if (run_dir / name).exists():
            return run_dir / name
    for top in sorted(run_dir.iterdir()):
        if top.name in SETUP_ENTRIES | NOT_SEARCHED or not top.is_dir() or top.is_symlink():
            continue
        for here, dirs, _ in os.walk(top):
            found = next((Path(here) / n for n in (*RUN_FILES, *SWEEP_FILES) if (Path(here) / n).exists()), None)
            if found is not None:
                return found
            dirs[:] = sorted(d for d in dirs if d not in NOT_SEARCHED)
    return None


def holding_run(run_dir: Path) -> Optional[Path]:
    """The run whose `checkpoints/` dir `run_dir` is or lies in (None: none): a run there would take that run's
    checkpoints for its own."""
    for folder in (run_dir, *run_dir.parents):
        if folder.name == CHECKPOINTS_DIR and any((folder.parent / name).exists() for name in RUN_FILES):
            return folder.parent
    return None


def check_one_run(run_dir: Path, where: str) -> None:
    """Refuses `run_dir` (named as `where`, e.g. hydra.run.dir='x') when it holds more than one run, or lies in
    another run's checkpoints/ dir."""
    holder = holding_run(Path(os.path.realpath(run_dir)))
    if holder is not None:
        raise ConfigError(f"{where} lies in the checkpoints/ dir of the run in {holder}, so no run starts in it (it "
                          "would continue that run's checkpoints as its own, or with resume=restart delete them); to "
                          f"continue that run, give its own dir: hydra.run.dir={str(holder)!r} resume=auto; for a "
                          "new run, give a new hydra.run.dir (or leave it out).")
    found = other_run(run_dir) if run_dir.is_dir() else None
    if found is None:
        return
    if found.parent == run_dir:
        what = f"it is a sweep dir ({found.name}); to continue the sweep, launch the same sweep again with -m"
    elif found.name in SWEEP_FILES:
        what = f"it holds a sweep ({found})"
    else:
        what = (f"it holds another run ({found}); to continue that one, give its own dir: "
                f"hydra.run.dir={str(found.parent)!r} resume=auto")
    raise ConfigError(f"{where} holds other runs, so no run starts in it (it would search, continue or with "
                      f"resume=restart delete their checkpoints): {what}; for a new run, give a new hydra.run.dir "
                      "(or leave it out).")
