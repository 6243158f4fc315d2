"""What a prepared cache was made from, file by file: each local source file's size and modification time.

A source's `describe()` names its files, but a file that grew or was replaced keeps its name, so a cache keyed by
names alone served the old tokens in silence. Size and mtime (what make and rsync compare) catch an append or a
replacement without reading the corpus again, which a content hash would at every start of training.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any


def local_files(source: Any) -> list[str]:
    """The local files a source reads: TextFiles' matches, an HF builder's local `data_files`; [] for the rest
    (a built-in corpus is keyed by the Python version in its description, a Hub dataset by its name)."""
    if hasattr(source, "files"):
        return list(source.files())
    data_files = getattr(source, "data_files", None)
    if data_files is None:
        return []
    if isinstance(data_files, str):
        patterns = [data_files]
    elif isinstance(data_files, dict):
        patterns = [p for v in data_files.values() for p in ([v] if isinstance(v, str) else v)]
    else:
        patterns = list(data_files)
    found = [m for p in patterns for m in sorted(glob.glob(os.path.expanduser(p), recursive=True))]
    return [m for m in found if Path(m).is_file()]


def file_identity(source: Any) -> list[dict[str, Any]]:
    """[{file, size, mtime_ns}] of each local file of the source, in the order it reads them."""
    out = []
    for name in local_files(source):
        stat = Path(name).stat()
        out.append({"file": str(Path(name).absolute()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return out


def changes(before: list[dict[str, Any]] | None, now: list[dict[str, Any]]) -> list[str]:
    """What differs between two file identities, one phrase per file (a cache made before they were recorded
    says so)."""
    if before is None:
        return ["the cache does not record its source files (made by an older gptlab)"] if now else []
    old, new = {f["file"]: f for f in before}, {f["file"]: f for f in now}
    out = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None:
            out.append(f"{name} is new")
        elif b is None:
            out.append(f"{name} is gone")
        elif a["size"] != b["size"]:
            out.append(f"{name} changed size ({a['size']:,} -> {b['size']:,} bytes)")
        elif a["mtime_ns"] != b["mtime_ns"]:
            out.append(f"{name} was modified")
    return out
