"""One run at a time in a run dir (issue 25): a second run into a dir in use is refused, naming the holder, before
it writes anything; the lock dies with its holder, also of SIGKILL, and a forked worker does not keep it alive."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import CHECKOUT_ENV, TINY_RUN, TRAIN_SCRIPT, run_train

from gptlab.errors import ConfigError
from gptlab.runs.run_dir_lock import LOCK_FILE, lock_run_dir, release

RUN = [*TINY_RUN, "trainer.max_steps=2", "data.store=memory"]


def tree(root: Path) -> dict[str, str]:
    """Every path with its content hash; the holder's own event files only by name (its TensorBoard writer flushes
    them from a thread while the run is paused)."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else "events" if "tfevents" in p.name else
            hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))}


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds  # a hang guard, not a measurement
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def held_run(tmp_path_factory):
    """A real run paused at step 1 in its run dir (it holds the lock and has written its setup files); SIGKILLed
    at the end of the module's tests."""
    tmp = tmp_path_factory.mktemp("held")
    run_dir, paused = tmp / "run", tmp / "paused"
    pause = ["+callbacks.pause._target_=helpers.PauseAtStep", "+callbacks.pause.step=1",
             f"+callbacks.pause.paused={paused}", f"+callbacks.pause.resume={tmp / 'never'}"]
    holder = subprocess.Popen([sys.executable, str(TRAIN_SCRIPT), *RUN, f"hydra.run.dir={run_dir}", *pause],
                              cwd=tmp, env=CHECKOUT_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(paused, holder)
        yield holder, run_dir
    finally:
        holder.kill()
        holder.communicate()


@pytest.mark.parametrize("extra", [["optimizer.lr=1e-3"], ["resume=auto"]], ids=["new_run", "resume_auto"])
def test_a_second_run_into_a_dir_in_use_is_refused_naming_the_holder(held_run, extra: list[str]) -> None:
    holder, run_dir = held_run
    before = tree(run_dir)
    proc = run_train([*RUN, f"hydra.run.dir={run_dir}", *extra], cwd=run_dir.parent)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.strip()
    assert line.startswith(f"gptlab: error: hydra.run.dir='{run_dir}' is in use by another run (pid {holder.pid} "
                           f"on {socket.gethostname()}, started "), line
    assert "train.py" in line and f"hydra.run.dir={run_dir}" in line and "\n" not in line, line  # its command
    assert tree(run_dir) == before  # nothing written, nothing removed
    assert holder.poll() is None  # the holder runs on


def test_a_sigkilled_holder_does_not_leave_the_dir_locked(tmp_path: Path) -> None:
    """The holder, and a forked worker of it that lives on: the lock goes with the holder."""
    ready = tmp_path / "ready"
    script = textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        from gptlab.runs.run_dir_lock import lock_run_dir
        lock_run_dir(Path({str(tmp_path)!r}))
        worker = os.fork()
        if worker == 0:
            time.sleep(600)  # a worker that outlives its parent
            os._exit(0)
        Path({str(ready)!r} + ".tmp").write_text(str(worker))
        os.rename({str(ready)!r} + ".tmp", {str(ready)!r})
        time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], env=CHECKOUT_ENV, start_new_session=True)
    try:
        _wait_for(ready, holder, 120)
        with pytest.raises(ConfigError, match=f"is in use by another run \\(pid {holder.pid} "):
            lock_run_dir(tmp_path)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        os.kill(int(ready.read_text()), 0)  # the forked worker still runs...
        fd = lock_run_dir(tmp_path)  # ...yet the lock went with the holder
        assert f'"pid": {os.getpid()}' in (tmp_path / LOCK_FILE).read_text()
        release(fd)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)


def test_after_the_holder_is_killed_a_run_goes_on_in_its_dir(held_run) -> None:
    holder, run_dir = held_run
    holder.kill()
    holder.communicate()
    proc = run_train([*RUN, f"hydra.run.dir={run_dir}", "resume=auto"], cwd=run_dir.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / "run_summary.json").is_file()
