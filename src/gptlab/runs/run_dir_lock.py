"""One run at a time in a run dir: `<run dir>/.gptlab.lock`, held with flock(2) for the life of the process
(gptlab.dir_lock).

Two runs writing one dir mix their records (one run's config, the other's checkpoints and summary, interleaved
event files), so the second is refused, naming the holder, before it writes anything. A run that ends removes the
file while it still holds the lock (a finished run leaves no lock file behind; a killed one leaves it, unlocked).
"""

from __future__ import annotations

from pathlib import Path

from gptlab.dir_lock import release, try_lock
from gptlab.errors import ConfigError

LOCK_FILE = ".gptlab.lock"
__all__ = ["LOCK_FILE", "lock_run_dir", "release"]


def lock_run_dir(run_dir: Path, field: str = "hydra.run.dir") -> int:
    """Takes the run dir's lock (the dir must exist) and returns its descriptor, held until the process ends or
    `release` is called; raises ConfigError naming the holder when another live run has it."""
    fd, holder = try_lock(run_dir / LOCK_FILE)
    if fd is None:
        raise ConfigError(
            f"{field}={str(run_dir)!r} is in use by another run ({holder}); one run writes a run dir at a time. "
            f"Wait for it to end, or give another {field}."
        )
    return fd
