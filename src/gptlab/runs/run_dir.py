"""The run dir: the files a training run leaves there, named once (train/ writes them, eval/ and tools/ read them,
and neither side imports the other for a file name), and the removal of what a run created when it stops before
its first optimizer step.

gptlab removes only what this process is known to have created: `note_origin` records, before Hydra or gptlab
creates anything, whether the run dir existed and what it held. A dir that existed (the launch dir under
`hydra.run.dir=.`, a dir the user made, an earlier run's dir) is never removed, whatever it holds; only the setup
entries this run added to it are. A dir this run created goes whole, with the parents it created if they are left
empty (another run may have put its own dir beside it). A DDP rank > 0 removes nothing; a sweep job's dir, made by
Hydra before train() runs, counts as existing: it stays, with its .hydra/.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from gptlab.errors import find_config_error
from gptlab.runs.run_dir_lock import LOCK_FILE

# Events: in <run name>/ for a single run (directly in it in runs made before), in <overrides>/ for a sweep job.
TENSORBOARD_DIR = "tensorboard"
RESOLVED_CONFIG = "config_resolved.yaml"  # the fully resolved config of the run (sample.py rebuilds from it)
SUMMARY_FILE = "run_summary.json"  # what a finished run measured; read by scripts/ablation_report.py
FAILURE_FILE = "failed.json"  # why a sweep job failed (diverged, refused for its values): the sweep went on
SWEEP_CONFIG = "sweep_config.json"  # in a sweep dir: what a relaunch must match (train.sweep_identity)

# Ends the name of every event file whose steps count optimizer steps done (gptlab.train.step_axis): a validation
# after the 80th step at 80. Event files made before have no suffix and log one less (79), Lightning's own count;
# readers add 1 to those (`steps_done_offset`). Per file, so a run resumed across the change reads right too.
STEPS_DONE_SUFFIX = ".steps_done"

SETUP_ENTRIES = {".hydra", RESOLVED_CONFIG, TENSORBOARD_DIR, "checkpoints", LOCK_FILE}  # + the job's log file


def event_files(run_dir: Path) -> list[Path]:
    """Every TensorBoard event file of a run, oldest first (a resumed run adds one): the one way to find them, since
    a sweep job's are one level deeper (`tensorboard/<overrides of the job>/`, named so TensorBoard shows them)."""
    files = (run_dir / TENSORBOARD_DIR).rglob("events.out.tfevents.*")
    return sorted((p for p in files if p.is_file()), key=lambda p: (p.stat().st_mtime_ns, p.name))


def steps_done_offset(event_file: Path) -> int:
    """What to add to an event file's steps to get the optimizer steps done (see STEPS_DONE_SUFFIX)."""
    return 0 if event_file.name.endswith(STEPS_DONE_SUFFIX) else 1


# Set by the launchers of a multi-process job (torchrun, Lightning's children, SLURM's srun, a second node's NODE_RANK);
# Lightning's own rank lookup ignores NODE_RANK, the only one a second node's first process may have.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def owns_run_dir() -> bool:
    """Whether this process is the job's rank 0, the one that holds, writes and cleans up the run dir; the other
    ranks join the dir it holds."""
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)


@dataclass(frozen=True)
class Origin:
    """What a run dir was before this process touched it."""
    created_from: Optional[Path]  # the highest dir this process creates (the run dir or a parent); None: it existed
    entries_before: frozenset[str]  # the names the run dir held


_origins: dict[Path, Origin] = {}


def first_missing(path: Path) -> Optional[Path]:
    """The highest dir of `path` that does not exist yet (None: `path` exists): what a mkdir -p would create."""
    missing = None
    while not path.exists():
        missing, path = path, path.parent
    return missing


def note_origin(run_dir: Path, created_from: Optional[Path] = None, ignore: Iterable[str] = ()) -> None:
    """Record the run dir as it is now (first record wins). `created_from`: what this process has just created
    (computed before its mkdir); `ignore`: entries this process has just added (its lock file)."""
    run_dir = run_dir.absolute()
    if run_dir in _origins:
        return
    if created_from is None:
        created_from = first_missing(run_dir)
    before = frozenset() if created_from is not None or not run_dir.is_dir() else \
        frozenset(p.name for p in run_dir.iterdir()) - set(ignore)
    _origins[run_dir] = Origin(created_from, before)


def forget_origin(run_dir: Path) -> None:
    """The run got past its setup: from here on nothing in the dir is removed by gptlab."""
    _origins.pop(run_dir.absolute(), None)


def remove_created(run_dir: Path, log_file: str = "train.log") -> list[Path]:
    """Removes what this process created in or for `run_dir` (see the module docstring); returns what it removed."""
    run_dir = run_dir.absolute()
    origin = _origins.pop(run_dir, None)
    if origin is None:
        return []
    if origin.created_from is not None:
        if not run_dir.exists():
            return []
        shutil.rmtree(run_dir)
        parent = run_dir.parent
        with contextlib.suppress(OSError):  # rmdir refuses a dir that is not empty: exactly the stop we want
            while parent == origin.created_from or origin.created_from in parent.parents:
                parent.rmdir()
                parent = parent.parent
        return [run_dir]
    removed = []
    for name in sorted((SETUP_ENTRIES | {log_file}) - origin.entries_before):
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(path)
    return removed


def say_removed(removed: list[Path]) -> None:
    """The one line that says what gptlab removed, on stderr beside the error that made it do so (the lock file
    this run made a moment ago goes unmentioned: it held no one's data)."""
    removed = [p for p in removed if p.name != LOCK_FILE]
    if removed:
        print(f"gptlab: removed {', '.join(str(p) for p in removed)}, created by this run before it stopped",
              file=sys.stderr, flush=True)


@dataclass
class Progress:
    """How far a run got: `started()` says whether it has trained (the body of discard_on_early_error sets it once
    it has a trainer, e.g. to `lambda: trainer.global_step > 0`)."""
    started: Callable[[], bool] = lambda: False


@contextlib.contextmanager
def discard_on_early_error(run_dir: Path, log_file: str = "train.log") -> Iterator[Progress]:
    """If the body fails on a user error (a ConfigError, also wrapped by Hydra's instantiate) before training
    started, remove what this process created; once a step was trained, the run's records stay whatever ends it."""
    if owns_run_dir():
        note_origin(run_dir)
    progress = Progress()
    try:
        yield progress
    except Exception as err:
        if find_config_error(err) is not None and not progress.started():
            say_removed(remove_created(run_dir, log_file))
        raise
    finally:
        forget_origin(run_dir)
