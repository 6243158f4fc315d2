"""One run at a time in a run dir: `<run dir>/.gptlab.lock`, held with flock(2) for the life of the process.

Two runs writing one dir mix their records (one run's config, the other's checkpoints and summary, interleaved
event files), so the second is refused, naming the holder, before it writes anything. flock rather than a pid
file: the kernel drops the lock when the holder dies, also of SIGKILL, so a killed run never leaves it stuck and
nothing has to guess whether a recorded pid is still the same process. What is held is the lock on the file; its
text only says who holds it now. A run that ends removes the file while it still holds the lock (a finished run
leaves no lock file behind; a killed one leaves it, unlocked). A run that took the lock on a file removed meanwhile
(it opened it just before) sees that the path no longer names its file and takes the lock again.

Forked workers would inherit the open file and keep the lock alive after their parent was killed; they close
their copy at once (os.register_at_fork), which leaves the parent's lock in place.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path

from gptlab.errors import ConfigError

LOCK_FILE = ".gptlab.lock"

_held: dict[int, Path] = {}  # the descriptors this process holds locks through, and their lock files


def _close_in_child() -> None:
    for fd in _held:
        os.close(fd)
    _held.clear()


def _names_file(path: Path, fd: int) -> bool:
    """Whether `path` is still the file open as `fd` (not removed, nor replaced by another run's)."""
    try:
        here, there = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


os.register_at_fork(after_in_child=_close_in_child)


def _holder_text() -> str:
    return json.dumps({
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": shlex.join([sys.executable, *sys.argv]),
    })


def _describe_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 1 << 16, 0).decode())
        return (f"pid {holder['pid']} on {holder['host']}, started {holder['started']}: "
                f"{holder['command']}")
    except (ValueError, KeyError, TypeError):  # it has just taken the lock and not yet written who it is
        return "a run that is just starting"


def lock_run_dir(run_dir: Path, field: str = "hydra.run.dir") -> int:
    """Takes the run dir's lock (the dir must exist) and returns its descriptor, held until the process ends or
    `release` is called; raises ConfigError naming the holder when another live run has it."""
    path = run_dir / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(fd)
            os.close(fd)
            raise ConfigError(
                f"{field}={str(run_dir)!r} is in use by another run ({holder}); one run writes a run dir at a time. "
                f"Wait for it to end, or give another {field}."
            ) from None
        if _names_file(path, fd):
            break
        os.close(fd)  # the run that held it removed it as it ended: lock the file that is there now
    os.ftruncate(fd, 0)
    os.pwrite(fd, _holder_text().encode(), 0)
    _held[fd] = path
    return fd


def release(fd: int) -> None:
    """Gives the lock back and removes the lock file, while still holding it (a run that ended, a sweep's job)."""
    if fd in _held:
        path = _held.pop(fd)
        if _names_file(path, fd):
            path.unlink()
        os.close(fd)  # closing the only descriptor of the open file drops its flock
