"""Write files by temp file + rename, so a reader (or a run killed midway) never sees half a file.

Kept free of Hydra and Lightning so the model package (Hugging Face export) can use it too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, Optional


def current_umask() -> int:
    """The process umask. POSIX offers no read-only call: set and restore it (instantaneous, same value)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[str], None], mode: Optional[int] = None) -> None:
    """`write(tmp)` fills a temporary file beside `path`; it then replaces `path` in one rename.
    `mode` sets its permissions; without it the file gets what `open()` would give it, 0o666 minus the process
    umask (mkstemp alone would make it 0600, unreadable to a group sharing a cluster or a data cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, mode if mode is not None else 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes, mode: Optional[int] = None) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it visible

    atomic_write(path, write, mode)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
