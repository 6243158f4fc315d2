"""Checks that run before training, so a full disk or a read-only output dir fails in seconds, not at the
first checkpoint hours later."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from gptlab.errors import ConfigError, format_size

RETAINED_CHECKPOINTS = 4  # best, last, preempted and one in flight: what the disk check budgets for


def checkpoint_bytes(num_parameters: int, optimizer_states_per_param: int = 2) -> int:
    """fp32 weights plus the optimizer's per-parameter states (AdamW keeps two)."""
    return 4 * num_parameters * (1 + optimizer_states_per_param)


def check_output_dirs(run_dir: Path, checkpoint_dirs: Iterable[Path], checkpoint_budget: int) -> None:
    """Every dir can be created and written, and each filesystem holding checkpoint dirs has `checkpoint_budget`
    bytes free (checkpoints are staged beside their final name, so their dirs are all the space they use)."""
    checkpoint_dirs = list(checkpoint_dirs)
    for directory in [run_dir, *checkpoint_dirs]:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-", suffix=".tmp"):
                pass
        except OSError as err:
            raise ConfigError(
                f"cannot write to output dir {directory} ({err.strerror or err}); "
                "fix its permissions or point paths.log_dir / hydra.run.dir somewhere writable."
            ) from err
    check_free_space(checkpoint_dirs, checkpoint_budget)


def check_free_space(checkpoint_dirs: Iterable[Path], checkpoint_budget: int) -> None:
    """Each filesystem that holds (or will hold) checkpoint dirs has `checkpoint_budget` bytes free; a dir not made
    yet is measured at its nearest existing parent, so this check creates nothing."""
    by_filesystem = {}
    for directory in checkpoint_dirs:
        existing = next(p for p in (directory, *directory.absolute().parents) if p.exists())
        by_filesystem.setdefault(existing.stat().st_dev, (directory, existing))
    for directory, existing in by_filesystem.values():
        free = shutil.disk_usage(existing).free
        if free < checkpoint_budget:
            raise ConfigError(
                f"checkpoint dir {directory} has {format_size(free)} free but the checkpoints (best, last, preempted "
                f"and one being written) need about {format_size(checkpoint_budget)}; free some space or point "
                "paths.log_dir at a larger disk."
            )
