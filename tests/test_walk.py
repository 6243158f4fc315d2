"""The walk of cfg from train() to the first build (tests/walk.py): it never comes back to a room it left, and the
resume mode, the checkpoint's check, the strategy and the parameter count are each computed once (issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import compose_tiny, train_in_process
from walk import COMPUTED_ONCE, walk_train


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run dir holding a checkpoint of one step, to continue from."""
    run_dir = tmp_path_factory.mktemp("walk") / "first"
    train_in_process(run_dir, "trainer.max_steps=1")
    return run_dir


@pytest.mark.parametrize("how", ["fresh", "ckpt_path", "resume_auto"])
def test_walk_to_the_first_build_returns_to_no_room(how, trained, tmp_path) -> None:
    overrides = {"fresh": ["trainer.max_steps=1"], "ckpt_path": ["trainer.max_steps=2", f"ckpt_path={trained}"],
                 "resume_auto": ["trainer.max_steps=2", "resume=auto"]}[how]
    walk = walk_train(compose_tiny(trained if how == "resume_auto" else tmp_path / "run", *overrides))
    assert walk.steps[-1][2] == "build_run", walk.steps
    assert walk.returns == [], f"the walk came back to rooms it had left: {walk.returns}; stays {walk.stays()}"
    twice = {name: n for name, n in walk.calls.items() if n > 1}
    assert not twice, f"computed more than once on the way to build_run: {twice}"
    if how != "fresh":
        assert walk.calls["check_resumable"] == 1 and walk.calls["resume_mode"] == 1, walk.calls
    assert set(walk.calls) <= set(COMPUTED_ONCE)
