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


def test_the_finished_runs_way_out_trains_it_further_when_typed(finished: Path) -> None:
    """Issue 46 case: `resume=auto trainer.max_steps=1` on a run finished at step 2 suggested trainer.max_steps=2
    (twice the asked, not past the step: typed, still finished) without the run's own overrides (typed, its model
    did not match the checkpoint). The suggestion now keeps the overrides and names a max_steps past the step."""
    import shlex

    asked = [a for a in RUN if not a.startswith("trainer.max_steps=")]
    proc = run_train([*asked, "trainer.max_steps=1", f"hydra.run.dir={finished}", "resume=auto"], cwd=finished.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    typed = shlex.split(proc.stdout.split("e.g. ", 1)[1].strip())
    assert typed[0] == "python" and typed[1].endswith("train.py") and "trainer.max_steps=4" in typed, typed
    assert set(asked) <= set(typed) and "trainer.max_steps=1" not in typed


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


@pytest.mark.parametrize("resume", [None, "auto", "restart"])
def test_fast_dev_run_takes_nothing_from_the_launch_dirs_runs(tmp_path: Path, resume) -> None:
    """debug=fast_dev_run's run dir is the launch dir, where earlier runs' checkpoints lie under outputs/ (the
    README's order: `python src/train.py`, then `debug=fast_dev_run`): never refused for them, never resumed from
    them, and resume=restart deletes none of them."""
    from helpers import compose_config

    from gptlab.runs.resume import resume_checkpoint

    earlier = tmp_path / "outputs" / "runs" / "train" / "d" / "t" / "checkpoints" / "last.ckpt"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"an earlier run's checkpoint")
    cfg = compose_config(["debug=fast_dev_run", f"resume={'null' if resume is None else resume}"], tmp_path)
    assert resume_checkpoint(cfg, tmp_path) is None
    assert earlier.read_bytes() == b"an earlier run's checkpoint"


def test_the_refusal_names_hydra_run_dir_only_where_the_user_gave_it(tmp_path: Path) -> None:
    """A run dir Hydra named itself (hydra=slurm's job id, a default dir) is "the run dir"; its way out is another
    hydra.run.dir, not leaving out one the user never set."""
    from helpers import CONF_DIR
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from gptlab.errors import ConfigError
    from gptlab.runs.resume import resume_checkpoint

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")
    said = {}
    for given in ([], [f"hydra.run.dir={tmp_path}"]):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("train", overrides=given, return_hydra_config=True)
        GlobalHydra.instance().clear()
        HydraConfig.instance().set_config(cfg)
        try:
            with pytest.raises(ConfigError) as err:
                resume_checkpoint(cfg, tmp_path)
        finally:
            HydraConfig.instance().cfg = None
        said[bool(given)] = str(err.value)
    assert said[False].startswith(f"the run dir {tmp_path} already holds a run") and "leave" not in said[False]
    assert said[True].startswith(f"hydra.run.dir='{tmp_path}' already holds a run")
    assert "leave hydra.run.dir out" in said[True]


def test_a_finished_run_leaves_no_lock_file(finished: Path) -> None:
    """The lock is the run's while it runs; the file goes with it (a killed run's stays, unlocked: run_dir_lock)."""
    assert not (finished / LOCK_FILE).exists()
    assert (finished / "run_summary.json").is_file()
