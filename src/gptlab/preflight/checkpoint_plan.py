"""How many checkpoints can be on disk at once, from the checkpoint callbacks a run is configured with, and the check
that each disk holding them has room, before anything trains.

What can exist at once, per filesystem: each ModelCheckpoint's `save_top_k` best (Lightning writes a new best before
deleting the one it replaces), one last.ckpt however many callbacks refresh it (the periodic one, the best one, whose
last.ckpt is a hard link of a same-step best, and the preemption save, which replaces it), and one checkpoint being
written beside the file it replaces (saves never overlap). gptlab's defaults: best + last + one being written. A null
callback counts nothing. The checkpoints already there that the run replaces (a resumed run's last.ckpt and best)
count as room: resuming after a disk-full stop, on the disk as it was when the run started, passes.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from gptlab.errors import ConfigError, format_size
from gptlab.preflight.output_dirs import check_can_create, nearest_existing

BEING_WRITTEN = 1  # checkpoints are saved one after another, each beside the file it replaces


@dataclass(frozen=True)
class Slot:
    """Checkpoints of one name (last.ckpt) or one callback's best, in one dir."""
    what: str  # "last.ckpt" or "the 1 best by val/loss"
    directory: Path
    callbacks: tuple[str, ...]  # the callbacks.<name> that write it
    count: int = 1
    best_glob: Optional[str] = None  # for a callback's best: the glob of its file names


def _callback_class(node: Any) -> Optional[type]:
    import hydra

    try:  # get_object, not get_class: that one logs an error line for a function before raising
        found = hydra.utils.get_object(str(node.get("_target_")))
    except Exception:  # not importable: the config checks name it; it saves no checkpoint counted here
        return None
    return found if isinstance(found, type) else None


def _glob(filename: Optional[str]) -> str:
    """ModelCheckpoint's `filename` template as a glob: each `{metric...}` becomes `*`."""
    return re.sub(r"\{[^}]*\}", "*", filename or "{epoch}-{step}") + ".ckpt"


def checkpoint_slots(callbacks: Optional[Mapping[str, Any]]) -> list[Slot]:
    """What the configured callbacks keep on disk (not counting the one being written)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    named: dict[tuple[Path, str], list[str]] = {}
    slots = []
    for name, node in (callbacks or {}).items():
        cls = _callback_class(node) if node is not None else None
        if cls is None or not node.get("dirpath"):
            continue
        directory = Path(str(node.get("dirpath")))
        if issubclass(cls, ModelCheckpoint):
            top_k = int(node.get("save_top_k", 1))
            save_last = node.get("save_last")
            if top_k != 0:  # -1 keeps every one: counted as one, the least it can be
                best = f"best by {node.get('monitor')}" if node.get("monitor") else "newest"
                slots.append(Slot(f"the {max(top_k, 1)} {best}", directory, (name,), max(top_k, 1),
                                  _glob(node.get("filename"))))
            if save_last and not (save_last == "link" and top_k != 0):  # "link": a symbolic link, no bytes
                named.setdefault((directory, ModelCheckpoint.CHECKPOINT_NAME_LAST + ".ckpt"), []).append(name)
        elif getattr(cls, "keeps_one_named_file", False):  # the preemption checkpoint
            named.setdefault((directory, f"{node.get('filename', 'last')}.ckpt"), []).append(name)
    return [Slot(what, directory, tuple(names)) for (directory, what), names in named.items()] + slots


def free_bytes(directory: Path) -> int:
    """Free space of the filesystem holding `directory` (module-level so tests can give a small disk)."""
    return shutil.disk_usage(directory).free


def _bytes(path: Path, seen: set[tuple[int, int]]) -> int:
    """Bytes of a checkpoint file or sharded folder, counting each inode once (last.ckpt may be a hard link)."""
    total = 0
    for file in ([path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]):
        st = file.stat()
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def replaced_checkpoints(slots: Iterable[Slot]) -> list[Path]:
    """The checkpoints already in the slots' dirs that the run will replace: last.ckpt, the preemption file and, of
    each callback's best, as many as it keeps (the newest)."""
    found = []
    for slot in slots:
        if not slot.directory.is_dir():
            continue
        if slot.best_glob is None:
            found += [slot.directory / slot.what] if (slot.directory / slot.what).exists() else []
            continue
        fixed = {s.what for s in slots if s.best_glob is None and s.directory == slot.directory}
        best = [p for p in slot.directory.glob(slot.best_glob) if p.name not in fixed]
        found += sorted(best, key=lambda p: p.stat().st_mtime_ns, reverse=True)[:slot.count]
    return found


def _filesystem(directory: Path) -> tuple[int, Path]:
    existing = nearest_existing(directory)
    return existing.stat().st_dev, existing


@dataclass
class Need:
    """The checkpoints of some slots on one filesystem: how many can exist at once, and the room the run gets back
    from the ones already there that it replaces."""
    count: int
    replaced: list[Path]
    credit: int

    def fits(self, free: int, size: int) -> bool:
        return free + self.credit >= self.count * size


def need(slots: list[Slot]) -> Need:
    seen: set[tuple[int, int]] = set()
    replaced = replaced_checkpoints(slots)
    count = sum(s.count for s in slots) + BEING_WRITTEN if slots else 0
    return Need(count, replaced, sum(_bytes(p, seen) for p in replaced))


def check_checkpoint_space(callbacks: Optional[Mapping[str, Any]], checkpoint_size: int,
                           log_dir: Optional[str] = None) -> None:
    """Refuse a run whose checkpoints cannot all fit at once on the filesystem(s) of their dirs. A dir not made yet is
    measured at its nearest existing parent, so this check creates nothing."""
    by_filesystem: dict[int, list[Slot]] = {}
    slots = checkpoint_slots(callbacks)
    check_can_create(slot.directory for slot in slots)
    for slot in slots:
        by_filesystem.setdefault(_filesystem(slot.directory)[0], []).append(slot)
    for group in by_filesystem.values():
        free = free_bytes(_filesystem(group[0].directory)[1])
        if not need(group).fits(free, checkpoint_size):
            raise ConfigError(_message(group, checkpoint_size, free, log_dir))


def _message(group: list[Slot], size: int, free: int, log_dir: Optional[str]) -> str:
    """The numbers, then every way out that works when followed: more space, another disk (a new run only), or
    fewer checkpoints kept (only where that then fits)."""
    directory, now = group[0].directory, need(group)
    kept = ", ".join(f"{s.what} ({', '.join('callbacks.' + c for c in s.callbacks)})" for s in group)
    have = f"{format_size(free)} free" + (
        f" plus {format_size(now.credit)} in the checkpoints this run replaces "
        f"({', '.join(p.name for p in now.replaced)})" if now.replaced else "")
    ways = [f"free {format_size(now.count * size - free - now.credit, up=True)} on that disk"]
    if not now.replaced:  # a run that continues its checkpoints cannot move; a new one can
        under_log_dir = log_dir is not None and Path(log_dir).absolute() in directory.absolute().parents
        ways.append("point paths.log_dir at a larger disk" if under_log_dir
                    else "give a hydra.run.dir (hydra.sweep.dir for a -m sweep) on a larger disk")
    best = [s for s in group if s.best_glob is not None]
    fewer = need([s for s in group if s.best_glob is None])
    if best and fewer.fits(free, size):
        ways.append(" ".join(f"callbacks.{s.callbacks[0]}.save_top_k=0" for s in best)
                    + f" (no best copy kept, last.ckpt still resumes the run: {fewer.count} checkpoints)")
    elif not now.replaced:
        names = sorted({c for s in group for c in s.callbacks})
        ways.append("`" + " ".join(f"callbacks.{c}=null" for c in names) + "` (no checkpoints: the run cannot be "
                    "resumed)")
    return (f"checkpoint dir {directory} has {have} but the checkpoints that can exist there at once need about "
            f"{format_size(now.count * size)}: {kept} and one being written, {now.count} x {format_size(size)} "
            f"(weights and optimizer states). To make it fit: {'; or '.join(ways)}.")
