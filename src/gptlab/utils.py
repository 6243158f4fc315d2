"""Small helpers shared by the entry points."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same directory, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def instantiate_dict(group: DictConfig | None) -> dict[str, Any]:
    """Instantiate every entry of a config group that is a dict of `_target_` objects (callbacks, loggers);
    an entry set to null is switched off."""
    if not group:
        return {}
    return {name: hydra.utils.instantiate(node) for name, node in group.items() if node is not None and "_target_" in node}
