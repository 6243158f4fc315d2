"""A temp file is its writer's while the writer lives and removable once it is gone (gptlab.atomic): a killed writer's
`.<name>.<random>.tmp` is removed by the next write of that file (a killed convert_checkpoint's stayed for good),
while a live writer's is never touched, by that write or by a run's start-up sweep of its dirs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers import CHECKOUT_ENV, HANG_GUARD_S

from gptlab.atomic import AtomicFile, atomic_write_bytes, remove_stale_temp_files

# A writer of `path` that holds its temp file open, says so, and waits to be killed.
WRITER = """
import sys
from pathlib import Path
from gptlab.atomic import AtomicFile
f = AtomicFile(Path(sys.argv[1]))
f.write(b"x" * 4096)
f.file.flush()
print(f.tmp, flush=True)
sys.stdin.read()
"""


def killed_writer(path: Path) -> Path:
    """The temp file a writer of `path` left when it was SIGKILLed while writing."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=CHECKOUT_ENV)
    temp = Path(proc.stdout.readline().strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=HANG_GUARD_S)
    assert temp.is_file() and temp.name.startswith(f".{path.name}.")
    return temp


def test_a_killed_writers_temp_file_goes_with_the_next_write_of_that_file(tmp_path: Path) -> None:
    target = tmp_path / "model.ckpt"
    left = killed_writer(target)
    other = tmp_path / ".notes.txt.abc.tmp"  # another file's temp: not this write's to judge
    other.write_bytes(b"")
    atomic_write_bytes(target, b"whole")
    assert target.read_bytes() == b"whole"
    assert not left.exists()
    assert other.exists()


def test_a_live_writers_temp_file_is_never_removed(tmp_path: Path) -> None:
    target = tmp_path / "shard.bin"
    live = AtomicFile(target)
    live.write(b"half")
    atomic_write_bytes(target, b"another writer's")  # the same target, meanwhile
    assert remove_stale_temp_files([tmp_path]) == []
    assert Path(live.tmp).is_file()
    live.write(b" and the rest")
    live.commit()
    assert target.read_bytes() == b"half and the rest"
    assert [p.name for p in tmp_path.iterdir()] == ["shard.bin"]


def test_a_runs_start_up_sweep_removes_only_abandoned_temp_files(tmp_path: Path) -> None:
    left = killed_writer(tmp_path / "last.ckpt")
    live = AtomicFile(tmp_path / "step3.ckpt")
    assert remove_stale_temp_files([tmp_path]) == [left]
    assert Path(live.tmp).is_file()
    live.discard()
