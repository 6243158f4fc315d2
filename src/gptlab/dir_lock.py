"""An flock(2) on a file, held by this process until `release` or its end: one writer of a run dir, of a prepared
cache, of a sweep's report at a time.

flock rather than a pid file: the kernel drops the lock when the holder dies, also of SIGKILL, so a killed process
never leaves it stuck and nothing has to guess whether a recorded pid is still the same process. What is held is
the lock on the file; its text only says who holds it now. A holder that is done removes the file while it still
holds the lock (no lock file is left behind; a killed holder leaves it, unlocked). A process that took the lock on
a file removed meanwhile (it opened it just before) sees that the path no longer names its file and takes the lock
again.

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
from typing import Callable, Optional

POLL_S = 0.1  # how often a waiter tries again: flock's blocking wait would not return for a stop signal

_held: dict[int, Path] = {}  # the descriptors this process holds locks through, and their lock files


def _close_in_child() -> None:
    for fd in _held:
        os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _names_file(path: Path, fd: int) -> bool:
    """Whether `path` is still the file open as `fd` (not removed, nor replaced by another holder's)."""
    try:
        here, there = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _holder_text() -> str:
    return json.dumps({
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": shlex.join([sys.executable, *sys.argv]),
    })


def describe_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 1 << 16, 0).decode())
        return (f"pid {holder['pid']} on {holder['host']}, started {holder['started']}: "
                f"{holder['command']}")
    except (ValueError, KeyError, TypeError):  # it has just taken the lock and not yet written who it is
        return "a process that is just starting"


def try_lock(path: Path) -> tuple[Optional[int], str]:
    """Take the lock on `path` (its dir must exist): (its descriptor, "") when taken, (None, who holds it) when
    another process does."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = describe_holder(fd)
            os.close(fd)
            return None, holder
        if _names_file(path, fd):
            break
        os.close(fd)  # the holder removed it as it was done: lock the file that is there now
    os.ftruncate(fd, 0)
    os.pwrite(fd, _holder_text().encode(), 0)
    _held[fd] = path
    return fd, ""


def wait_lock(path: Path, waiting: Callable[[str], None], poll: Callable[[], None] = lambda: None) -> int:
    """Take the lock on `path`, waiting while another process holds it: `waiting(who)` is called once when it must
    wait, `poll()` at each try (to stop for a signal)."""
    said = False
    while True:
        fd, holder = try_lock(path)
        if fd is not None:
            return fd
        if not said:
            waiting(holder)
            said = True
        poll()
        time.sleep(POLL_S)


def release(fd: int) -> None:
    """Give the lock back and remove the lock file, while still holding it."""
    if fd in _held:
        path = _held.pop(fd)
        if _names_file(path, fd):
            path.unlink()
        os.close(fd)  # closing the only descriptor of the open file drops its flock
