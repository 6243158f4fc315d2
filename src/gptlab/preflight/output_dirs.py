"""Checks that run before training, so a full disk or a read-only output dir fails in seconds, not at the
first checkpoint hours later."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterable

from gptlab.errors import ConfigError


def checkpoint_bytes(num_parameters: int, optimizer_states_per_param: int = 2) -> int:
    """fp32 weights plus the optimizer's per-parameter states (AdamW keeps two)."""
    return 4 * num_parameters * (1 + optimizer_states_per_param)


def check_output_dirs(run_dir: Path, checkpoint_dirs: Iterable[Path]) -> None:
    """Every dir is created and takes a file (their free space: preflight/checkpoint_plan.py)."""
    for directory in [run_dir, *checkpoint_dirs]:
        _check_writable(directory, create=True)


def check_can_create(directories: Iterable[Path]) -> None:
    """Before a run writes anything: the nearest existing dir of each takes a file (a probe, removed at once), so
    a dir in /proc or on a read-only mount is refused for what it is, not for the free space its filesystem shows."""
    for directory in directories:
        _check_writable(directory, create=False)


def nearest_existing(directory: Path) -> Path:
    """`directory`, or its nearest parent that exists: where a dir not made yet will be made."""
    return next(p for p in (directory, *directory.absolute().parents) if p.exists())


def _check_writable(directory: Path, create: bool) -> None:
    try:
        if create:
            directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=nearest_existing(directory), prefix=".write-test-", suffix=".tmp"):
            pass
    except OSError as err:
        raise ConfigError(f"cannot write to output dir {directory} ({err.strerror or err}); fix its permissions, or "
                          "give hydra.run.dir=<dir> (paths.log_dir=<dir> for every run) on a writable disk.") from err
