"""Write files by temp file + fsync + rename, so a reader (or a run killed midway) never sees half a file.

The temp file is made beside its target, never in $TMPDIR: a rename within one directory is atomic on every
POSIX filesystem (ext4, XFS, NFS, Lustre, tmpfs), while a move from another filesystem is a copy that first
truncates the old file. A kill leaves at most a `.<name>.<random>.tmp` beside the target. Its writer holds an
flock on it for as long as it writes (the kernel drops it when the writer dies, of SIGKILL too), so a temp file whose
lock is free is abandoned: the next write of the same target removes it (a killed convert_checkpoint's 400 MB
file went on forever) and `remove_stale_temp_files` clears a dir's at a run's start, while a live writer's is never
touched. Kept free of Hydra and Lightning so the model package (Hugging Face export) can use it too.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Optional

from gptlab.errors import DiskFullError, format_size

TEMP_SUFFIX = ".tmp"
NO_SPACE = {errno.ENOSPC, errno.EDQUOT}
SLACK_BYTES = 1 << 20  # below this much free space after a failed write, the disk was full


def current_umask() -> int:
    """The process umask. POSIX offers no read-only call: set and restore it (instantaneous, same value)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (a crash of the node right after could otherwise undo it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # some filesystems do not open directories; the rename itself is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass  # e.g. EINVAL on filesystems without directory fsync
    finally:
        os.close(fd)


def _disk_was_full(err: BaseException, directory: Path, size_hint: Optional[int]) -> bool:
    """torch's zip writer hides ENOSPC behind a RuntimeError, so also ask the disk how much is left."""
    seen: Optional[BaseException] = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in NO_SPACE:
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return False
    return free < max(SLACK_BYTES, size_hint or 0)


def _writer_alive(temp: Path) -> bool:
    """Whether a temp file's writer still holds it (its flock is taken). A filesystem without locks answers no, as
    every temp file was taken for abandoned before writers locked them."""
    try:
        fd = os.open(temp, os.O_RDWR | os.O_CLOEXEC)  # read-write: NFS emulates flock with a write lock
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # drops the probe's lock
    return False


def _is_temp(p: Path) -> bool:
    return p.name.startswith(".") and p.name.endswith(TEMP_SUFFIX) and p.is_file()


def remove_abandoned_temps(path: Path) -> list[Path]:
    """Delete the temp files of `path` (`.<name>.<random>.tmp` beside it) whose writers are gone; returns them."""
    path = Path(path)
    found = [p for p in path.parent.glob(f".{glob.escape(path.name)}.*{TEMP_SUFFIX}") if _is_temp(p)]
    removed = [p for p in found if not _writer_alive(p)]
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


def _locked_temp(path: Path) -> tuple[int, str]:
    """A new temp file beside `path`, open and flocked for as long as it is written (see the module docstring). A
    file removed as abandoned between its creation and its lock is made again."""
    while True:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            here, there = os.stat(tmp), os.fstat(fd)
            if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
                return fd, tmp
        except BlockingIOError:  # a cleaner probing it this instant: it will remove it
            pass
        except FileNotFoundError:  # already removed by one
            pass
        except OSError:  # a filesystem without locks: write unlocked, as before
            return fd, tmp
        os.close(fd)


def atomic_write(path: Path, write: Callable[[str], None], mode: Optional[int] = None,
                 size_hint: Optional[int] = None, disk_full_advice: str = "Free some space and run again.") -> None:
    """`write(tmp)` fills a temporary file beside `path`; it is fsynced, then replaces `path` in one rename.
    `mode` sets its permissions; without it the file gets what `open()` would give it, 0o666 minus the process
    umask (mkstemp alone would make it 0600, unreadable to a group sharing a cluster or a data cache).
    A full disk raises DiskFullError; on any failure the temp file is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_temps(path)  # what a killed writer of this file left
    fd, tmp = _locked_temp(path)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())  # on disk before the rename makes it visible
        _install(tmp, path, mode)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        _raise_if_disk_full(err, path, size_hint, disk_full_advice)
        raise
    finally:
        os.close(fd)  # the lock goes with it
    fsync_dir(path.parent)


def _install(tmp: str, path: Path, mode: Optional[int]) -> None:
    """Give the synced temp file its permissions and rename it over `path`."""
    os.chmod(tmp, mode if mode is not None else 0o666 & ~current_umask())
    os.replace(tmp, path)


def _raise_if_disk_full(err: BaseException, path: Path, size_hint: Optional[int], advice: str) -> None:
    """A DiskFullError naming `path` and the space left, when `err` came from a full disk."""
    if isinstance(err, Exception) and _disk_was_full(err, path.parent, size_hint):
        free = shutil.disk_usage(path.parent).free
        needed = f", about {format_size(size_hint)} needed" if size_hint else ""
        raise DiskFullError(
            f"disk full: could not write {path} ({format_size(free)} free{needed}); nothing was replaced, "
            f"the previous version of the file (if any) is intact. {advice}"
        ) from err


class AtomicFile:
    """A file written piece by piece over a long time (a token shard as its batches arrive) that appears at `path`
    whole at `commit()`, or never: the same temp file, fsync and rename as `atomic_write`, for writers that cannot
    hand over one callback. `discard()` (or a kill) leaves `path` as it was."""

    def __init__(self, path: Path, mode: Optional[int] = None) -> None:
        self.path, self.mode = Path(path), mode
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = _locked_temp(self.path)  # the lock lasts as long as the file is open
        self.file = os.fdopen(fd, "r+b")

    def write(self, data: bytes) -> None:
        self._guard(lambda: self.file.write(data))

    def commit(self) -> None:
        self._guard(self._replace)
        fsync_dir(self.path.parent)

    def _replace(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        _install(self.tmp, self.path, self.mode)  # still open, so still locked: never taken for abandoned
        self.file.close()

    def discard(self) -> None:
        Path(self.tmp).unlink(missing_ok=True)  # before the close drops the lock
        self.file.close()

    def _guard(self, step: Callable[[], object]) -> None:
        """Run a write step; on failure remove the temp file, and name a full disk as such."""
        try:
            step()
        except BaseException as err:
            self.discard()
            _raise_if_disk_full(err, self.path, None, "Free some space and run again.")
            raise


def atomic_write_bytes(path: Path, data: bytes, mode: Optional[int] = None) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data), mode, size_hint=len(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def remove_stale_temp_files(directories: Iterable[Path]) -> list[Path]:
    """Delete the temp files that killed writers left in `directories` (not recursive); returns them.
    Only this module's own names (`.<name>.<random>.tmp`) are touched, and only those no live writer holds."""
    removed = []
    for directory in directories:
        if not directory.is_dir():
            continue
        for p in directory.iterdir():
            if _is_temp(p) and not _writer_alive(p):
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed


def replace_folder(new: Path, path: Path) -> None:
    """Put the whole folder `new` at `path`. A folder cannot be renamed over a non-empty one, so an older checkpoint
    there is first renamed aside (a hidden, non-`*.ckpt` name) and deleted after: at every instant `path` is the old
    whole checkpoint, absent, or the new whole one."""
    old = path.with_name(f".{path.name}.old")
    remove(old)  # left by a save killed between the two renames below
    if path.exists():
        os.replace(path, old)
    os.replace(new, path)
    remove(old)


STAGING_DIR = f".staging{TEMP_SUFFIX}"  # inside a target dir: the files of one write_together, until all are written


def write_together(directory: Path, write: Callable[[Path], None]) -> None:
    """Files that are only of use together (a Hugging Face export: weights, config, tokenizer) appear in `directory`
    all or none. `write(staging)` fills a hidden folder inside `directory`; only when it has finished are its files
    renamed into place, one rename each, which needs no space. On any failure (a full disk, a kill) the staging
    folder goes, and `directory` too when this call made it and nothing else is in it: the files already there stay
    as they were."""
    directory = Path(directory)
    made = not directory.exists()
    staging = directory / STAGING_DIR
    directory.mkdir(parents=True, exist_ok=True)
    remove(staging)  # left by a write killed before
    try:
        staging.mkdir()
        write(staging)
    except BaseException:
        remove(staging)
        if made and not any(directory.iterdir()):
            directory.rmdir()
        raise
    for path in sorted(staging.iterdir()):
        os.replace(path, directory / path.name)
    staging.rmdir()
    fsync_dir(directory)


# A filesystem that has no hard links (some FUSE and object-store mounts) or refuses one more link to the file.
NO_HARD_LINK = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def link_into_place(src: Path, path: Path) -> bool:
    """Make `path` a second name of `src` (a file, or a folder of files such as a sharded checkpoint), using no
    space: hard links made under a temp name beside `path`, then renamed over it (a folder by `replace_folder`).
    Safe because gptlab never writes into an existing file: every save renames a new file over the old name, so
    writing one name never changes the other. Returns False, leaving `path` as it was, on a filesystem that
    refuses hard links; the caller then writes a copy."""
    src, path = Path(src), Path(path)
    if src.is_dir():
        temp = path.with_name(f".{path.name}.link{TEMP_SUFFIX}")
        remove(temp)  # left by a link killed midway
        try:
            for directory, _dirs, files in os.walk(src):
                inside = temp / Path(directory).relative_to(src)
                inside.mkdir(parents=True)
                for name in files:
                    os.link(Path(directory) / name, inside / name)
        except OSError as err:
            remove(temp)
            if err.errno in NO_HARD_LINK:
                return False
            raise
        replace_folder(temp, path)
        return True
    fd, temp_file = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    os.close(fd)
    os.unlink(temp_file)  # only its unique name is wanted: os.link will not overwrite
    try:
        os.link(src, temp_file)
    except OSError as err:
        if err.errno in NO_HARD_LINK:
            return False
        raise
    os.replace(temp_file, path)
    fsync_dir(path.parent)
    return True


def remove(path: Path) -> None:
    """Delete one of gptlab's own temp names (a folder or a file), if there."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
