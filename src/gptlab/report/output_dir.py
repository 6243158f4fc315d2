"""Where a sweep's report goes, and one report writer at a time. Into the sweep dir, or, when that cannot be written
(a read-only mount, another user's results), into a dir of its own under $TMPDIR, said on stderr: a read-only sweep
dir gave `OSError: [Errno 30] Read-only file system` after all the reading. Two reports on one sweep write the same
files: the second waits for the first (gptlab.dir_lock), so neither reads a half-made set."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from gptlab.dir_lock import release, wait_lock

LOCK_FILE = ".gptlab-report.lock"  # not the run dir's .gptlab.lock: a sweep still running holds that one


@functools.cache
def report_dir(sweep_dir: Path) -> Path:
    """The sweep dir when it can be written (or does not exist: reading it refuses that), else a dir of its own."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir() or os.access(sweep_dir, os.W_OK):  # a read-only mount answers no, to root too
        return sweep_dir
    digest = hashlib.sha1(str(sweep_dir.resolve()).encode()).hexdigest()[:8]
    elsewhere = Path(tempfile.gettempdir()) / "gptlab-reports" / f"{sweep_dir.name}-{digest}"
    elsewhere.mkdir(parents=True, exist_ok=True)
    print(f"gptlab: {sweep_dir} cannot be written (read-only); the report goes to {elsewhere} instead",
          file=sys.stderr, flush=True)
    return elsewhere


@contextlib.contextmanager
def one_report_writer(sweep_dir: Path) -> Iterator[None]:
    """Held while a report of `sweep_dir` is made: another one on the same sweep waits, saying so."""
    out = report_dir(sweep_dir)
    if not out.is_dir():
        yield
        return
    lock = wait_lock(out / LOCK_FILE, lambda holder: print(
        f"gptlab: another report of {sweep_dir} is being written ({holder}); waiting for it to finish",
        file=sys.stderr, flush=True))
    try:
        yield
    finally:
        release(lock)
