"""What a run does with a run dir that already holds a run (issue 25): resume=auto leaves a finished run exactly as
it was, refuses a dir whose checkpoints are all unreadable (naming each and why), a run without resume is refused
in a dir that holds checkpoints, and resume=restart starts over, saying what it deleted."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from helpers import TINY_RUN, load_checkpoint, run_train, train_in_process

from gptlab.runs.run_dir import event_files
from gptlab.runs.run_dir_lock import LOCK_FILE

RUN = [*TINY_RUN, "trainer.max_steps=2", "trainer.val_check_interval=2", "scheduler.warmup_steps=0",
       "data.store=memory"]  # no warmup warning: the tests read what the run prints


def tree(root: Path) -> dict[str, str]:
    """Every path with its content hash; the lock file only by name (each run that takes the lock writes its own
    pid and command there, see gptlab.runs.run_dir_lock)."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else "lock" if p.name == LOCK_FILE else
            hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A run that reached trainer.max_steps=2, through the real entry point (so it has .hydra/ and its lock file)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    run_train([*RUN, f"hydra.run.dir={run_dir}"], cwd=run_dir.parent, check=True)
    return run_dir


def test_resume_auto_on_a_finished_run_changes_nothing(finished: Path) -> None:
    before = tree(finished)
    proc = run_train([*RUN, f"hydra.run.dir={finished}", "resume=auto"], cwd=finished.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"gptlab: {finished} is finished: its newest checkpoint "
                                  f"({finished / 'checkpoints' / 'last.ckpt'}) is at step 2 of trainer.max_steps=2, "
                                  "best val/loss "), proc.stdout
    assert f"trainer.max_steps=4 resume=auto hydra.run.dir={finished}" in proc.stdout
    assert proc.stderr == "", proc.stderr
    assert tree(finished) == before  # run_summary.json, .hydra/, the log: byte for byte


def test_resume_auto_on_a_finished_run_in_process_changes_nothing(finished: Path) -> None:
    """train() called without Hydra (a sweep's in-process job, a test) makes the same decision."""
    before = tree(finished)
    best = train_in_process(finished, *RUN, "resume=auto")
    assert tree(finished) == before
    assert best == json.loads((finished / "run_summary.json").read_text())["best_val_loss"]


def test_a_new_run_into_a_dir_with_checkpoints_is_refused(finished: Path) -> None:
    before = tree(finished)
    proc = run_train([*RUN, f"hydra.run.dir={finished}"], cwd=finished.parent)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"gptlab: error: hydra.run.dir='{finished}' already holds a run (2 checkpoint(s), "
                                  "newest "), proc.stderr
    assert "resume=auto" in proc.stderr and "resume=restart" in proc.stderr
    assert tree(finished) == before


@pytest.fixture
def unreadable(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished run whose every checkpoint is damaged: one cut short, one emptied."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    checkpoints = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    assert len(checkpoints) == 2
    checkpoints[0].write_bytes(checkpoints[0].read_bytes()[:4000])
    checkpoints[1].write_bytes(b"")
    return run_dir


def test_resume_auto_refuses_a_dir_whose_checkpoints_are_all_unreadable(unreadable: Path) -> None:
    before = tree(unreadable)
    proc = run_train([*RUN, f"hydra.run.dir={unreadable}", "resume=auto"], cwd=unreadable.parent)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr.strip()
    assert err.startswith(f"gptlab: error: resume=auto: no checkpoint in {unreadable} can be continued ("), err
    for path in (unreadable / "checkpoints").glob("*.ckpt"):
        assert str(path) in err
    assert "empty (0 bytes)" in err and ("truncated or corrupt" in err or "not a PyTorch checkpoint" in err), err
    assert "resume=restart" in err and "\n" not in err
    assert tree(unreadable) == before  # nothing trained over them, nothing written


def test_resume_restart_starts_over_and_says_what_it_deleted(unreadable: Path) -> None:
    old = sorted(p.name for p in (unreadable / "checkpoints").glob("*.ckpt"))
    proc = run_train([*RUN, "trainer.max_steps=3", f"hydra.run.dir={unreadable}", "resume=restart"],
                     cwd=unreadable.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "resume=restart: removed" in line]
    assert len(said) == 1 and all(f"checkpoints/{name}" in said[0] for name in old), said
    assert "run_summary.json" in said[0] and "events.out.tfevents" in said[0], said
    assert load_checkpoint(unreadable / "checkpoints" / "last.ckpt")["global_step"] == 3
    assert len(event_files(unreadable)) == 1  # only the new run's
