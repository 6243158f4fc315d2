"""A lost rank's message (gptlab.launch.rank_watch), in-process on a real child killed by a real signal: a SIGKILL is
named as out of memory with the memory way out, and resume is offered only where a checkpoint was written (issue 46:
an OOM-killed rank was sent to `resume=auto` over an empty checkpoints/)."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gptlab.launch.rank_watch import RankWatch


def watch_with_killed_child(run_dir: Path, signum: int) -> RankWatch:
    """A watch whose rank 1 (a real process) was killed by `signum`, for a run of micro-batch 8 saving under
    run_dir/checkpoints."""
    watch = RankWatch()
    watch.start(SimpleNamespace(global_step=7, world_size=2, default_root_dir=str(run_dir),
                                datamodule=SimpleNamespace(batch_size=8),
                                checkpoint_callbacks=[SimpleNamespace(dirpath=str(run_dir / "checkpoints"))]))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.send_signal(signum)
    child.wait(timeout=30)
    watch.children = [child]
    return watch


def test_an_oom_killed_rank_without_checkpoints_is_named_and_not_sent_to_resume(tmp_path: Path) -> None:
    message = watch_with_killed_child(tmp_path / "run", signal.SIGKILL).lost_rank()
    assert message is not None and message.startswith("rank 1 (pid "), message
    assert "was killed by SIGKILL at step 7, most likely by the kernel's OOM killer" in message
    assert "data.batch_size=4" in message and "runtime.activation_checkpointing=true" in message
    assert "resume=auto" not in message and "nothing to resume" in message


@pytest.mark.parametrize("layout", ["last.ckpt", "sharded.ckpt/"])
def test_a_lost_rank_after_a_checkpoint_is_sent_to_resume_in_its_run_dir(tmp_path: Path, layout: str,
                                                                           monkeypatch) -> None:
    run_dir = tmp_path / "run dir"  # a space: the printed command quotes it
    (run_dir / "checkpoints").mkdir(parents=True)
    saved = run_dir / "checkpoints" / layout.rstrip("/")
    saved.mkdir() if layout.endswith("/") else saved.write_bytes(b"x")
    monkeypatch.setattr(sys, "argv", ["src/train.py", "trainer=ddp", "resume=restart"])
    message = watch_with_killed_child(run_dir, signal.SIGSEGV).lost_rank()
    assert "was killed by SIGSEGV at step 7;" in message and "OOM" not in message
    command = message.split("continue with ", 1)[1]
    assert shlex.split(command) == ["python", "src/train.py", "trainer=ddp", "resume=auto",
                                    f"hydra.run.dir='{run_dir.resolve()}'"]
