"""Where a tool that writes a user-named target (an export, a conversion) may write: never over a file it did not
write unless told so with an overwrite flag, and never into a run's `checkpoints/` (a training run's full checkpoint
replaced by a weights-only file loses its optimizer, RNG and data position for good). One rule for every such tool,
so the flag has the same name and the refusal the same words everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from gptlab.checkpoint.dirs import CHECKPOINTS_DIR
from gptlab.errors import ConfigError
from gptlab.runs.run_dir import RESOLVED_CONFIG, SUMMARY_FILE

RUN_MARKERS = (".hydra", RESOLVED_CONFIG, SUMMARY_FILE)


def run_checkpoints_dir(path: Path) -> Path | None:
    """The run's `checkpoints/` dir that `path` lies in (or is), None when it is not inside one."""
    for folder in (path, *path.parents):
        if folder.name == CHECKPOINTS_DIR and folder.is_dir() and (
                any((folder.parent / marker).exists() for marker in RUN_MARKERS) or any(folder.glob("*.ckpt"))):
            return folder
    return None


def _refuse_run_checkpoints(field: str, path: Path) -> None:
    folder = run_checkpoints_dir(path.absolute())
    if folder is not None:
        raise ConfigError(f"{field}={str(path)!r} lies in {folder}, a training run's checkpoint dir: what is written "
                          "there could replace the run's own checkpoints (and resume=auto would pick it up). Write it "
                          "outside the run's checkpoints/ dir.")


def check_new_file(field: str, path: Path, overwrite: bool, flag: str) -> None:
    """Refuse a target file that exists (unless `overwrite`; `flag` is how the tool spells it) or that lies in a run's
    checkpoints/ dir (whatever the flag)."""
    _refuse_run_checkpoints(field, path)
    if path.is_dir():
        raise ConfigError(f"{field}={str(path)!r} is a directory; give the path of the file to write.")
    if path.exists() and not overwrite:
        raise ConfigError(f"{field}={str(path)!r} already exists and was left as it is; choose a new path, or pass "
                          f"{flag} to replace it.")


def check_new_dir(field: str, path: Path, overwrite: bool, flag: str, writes: Iterable[str] = ()) -> None:
    """Refuse a target dir that already holds files (unless `overwrite`: then only the files the tool `writes` are
    replaced, the others stay), or that lies in a run's checkpoints/ dir (whatever the flag)."""
    _refuse_run_checkpoints(field, path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{field}={str(path)!r} is a file, not a directory; choose a directory to write into.")
    held = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    if held and not overwrite:
        listed = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
        replaced = sorted(set(held) & set(writes))
        which = f": {', '.join(replaced)} would be replaced, the other files stay" if replaced else ""
        raise ConfigError(f"{field}={str(path)!r} already holds files ({listed}) and was left as it is; choose a new "
                          f"or empty directory, or pass {flag} to write into it{which}.")
