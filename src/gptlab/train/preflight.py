"""Checks that run before training, so a full disk or a read-only output dir fails in seconds, not at the
first checkpoint hours later."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from gptlab.errors import ConfigError

GiB = 1024**3


def checkpoint_bytes(num_parameters: int, optimizer_states_per_param: int = 2) -> int:
    """fp32 weights plus the optimizer's per-parameter states (AdamW keeps two)."""
    return 4 * num_parameters * (1 + optimizer_states_per_param)


def check_output_dirs(dirs: Iterable[Path], required_bytes: int) -> None:
    """Each dir can be created and written, and the disk holding it has `required_bytes` free."""
    for directory in dirs:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
                pass
        except OSError as err:
            raise ConfigError(
                f"cannot write to output dir {directory} ({err.strerror or err}); "
                "fix its permissions or point paths.log_dir / hydra.run.dir somewhere writable."
            ) from err
        free = shutil.disk_usage(directory).free
        if free < required_bytes:
            raise ConfigError(
                f"output dir {directory} has {free / GiB:.2f} GiB free but the checkpoints need about "
                f"{required_bytes / GiB:.2f} GiB; free some space or point paths.log_dir at a larger disk."
            )
