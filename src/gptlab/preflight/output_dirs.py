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
    """Every dir can be created and written (their free space: preflight/checkpoint_plan.py)."""
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
