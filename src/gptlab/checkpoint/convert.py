"""A sharded checkpoint (trainer=fsdp) as one file: for tools that want a single `.ckpt`, or to keep a run's weights
in one place. DCP joins every rank's chunks in this one process (no process group, any world size that wrote it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gptlab.checkpoint.atomic_io import save_whole
from gptlab.checkpoint.reader import read_checkpoint, resolve_checkpoint
from gptlab.checkpoint.sharded import is_sharded
from gptlab.errors import ConfigError

ARGUMENT = "the checkpoint argument"  # convert_checkpoint.py's first positional argument: no key= sets it


def to_one_file(src: Path, out: Path) -> dict[str, Any]:
    """Write the sharded checkpoint `src` (or a run dir's newest loadable one) as the one-file checkpoint `out`:
    Lightning's meta.pt plus the whole `state_dict`. The optimizer states are left out, so the file is for eval,
    sampling and export, not for resuming (resume from the folder itself, on any number of ranks)."""
    src = resolve_checkpoint(src, ARGUMENT)
    if not is_sharded(src):
        read_checkpoint(src, ARGUMENT, mmap=True)  # a path that is no checkpoint at all is named as such
        raise ConfigError(f"{src} is already a one-file checkpoint; eval, sample and export read it as it is.")
    if out.is_dir():
        raise ConfigError(f"out={str(out)!r} is a directory; give the path of the file to write (e.g. model.ckpt).")
    ckpt = read_checkpoint(src, ARGUMENT)
    try:
        save_whole(ckpt, out)
    except OSError as err:  # a read-only filesystem, a dir without write permission (a full disk is DiskFullError)
        raise ConfigError(f"out={str(out)!r} cannot be written ({err.strerror or err}); choose a path you can write "
                          "to.") from err
    return ckpt
