"""The fault drill behind scripts/fault_drill.py: kill a training run again and again, resume it each time with
`resume=auto`, and check that nothing was lost: every kill resumed from a checkpoint that loads, no temp file
left anywhere, and train/loss at every step bit-identical to a run that was never interrupted.

A share of the kills is aimed at checkpoint writes: the run is told (a drill-only callback, `HoldCheckpointWrite`)
to hold its k-th checkpoint write open, its temp file beside `last.ckpt` already created, and the drill sends
SIGKILL then. Holding the write, rather than polling for its temp file, makes the aim exact on a loaded machine,
where a poller sleeps through a write of a few milliseconds. The other kills are aimed by events too, never by the
clock: each at a step drawn at random (`HoldAfterStep` holds the run once that step is done), so the drill kills
at the same steps and passes alike on an idle and on a loaded machine. The children's $TMPDIR is put on another
filesystem than the run dir (a tmpfs mounted for the drill as root, else /dev/shm, else `tmpdir=`), the layout of
a cluster node where a rename between the two would be a copy.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import lightning as L
from lightning.pytorch import Callback

from gptlab.checkpoint.reader import newest_loadable_checkpoint, read_checkpoint
from gptlab.runs.run_dir import event_files, steps_done_offset
from gptlab.tools.drill_launch import Launch, start_job

REPO = Path(__file__).resolve().parents[3]
HOLD_SECONDS = 600.0
TRAIN = REPO / "src" / "train.py"
# Small enough for seconds per attempt on a 2-core CPU; wide enough (a 5 MB checkpoint) that a write lasts
# milliseconds, long enough to be hit; dropout so the restored RNG state matters.
RUN_OVERRIDES = [
    "model.n_layer=2", "model.n_head=4", "model.n_embd=128", "model.block_size=64", "model.dropout=0.1",
    "data.batch_size=8", "trainer.accelerator=cpu", "trainer.log_every_n_steps=1", "trainer.limit_val_batches=2",
    "trainer.enable_model_summary=false", "callbacks.progress_bar=null", "callbacks.text_samples.max_new_tokens=16",
]


@dataclass
class DrillResult:
    steps: int
    kills: int = 0
    aimed_kills: int = 0  # kills while a checkpoint's temp file was being written
    resumes: int = 0  # restarts that continued from a checkpoint and went on training
    lost_steps: int = 0  # steps computed before a kill and computed again after it
    cut_writes: int = 0  # half-written temp checkpoints that kills left beside their target (removed at restart)
    leaked: list[str] = field(default_factory=list)  # temp files left in $TMPDIR or the run dir
    mismatched_steps: list[int] = field(default_factory=list)  # steps whose train/loss differs from the reference
    missing_steps: list[int] = field(default_factory=list)  # steps with no train/loss at all
    failures: list[str] = field(default_factory=list)  # attempts that ended on their own with an error
    layout: str = ""

    @property
    def passed(self) -> bool:
        return (self.resumes == self.kills and not self.leaked and not self.mismatched_steps
                and not self.missing_steps and not self.failures)

    def table(self, seconds: float) -> str:
        checked = self.steps - len(self.missing_steps)
        rows = [
            ("layout", self.layout),
            ("kills", f"{self.kills} ({self.aimed_kills} during a checkpoint write)"),
            ("resumed", f"{self.resumes}/{self.kills} from a checkpoint that loaded"),
            ("lost steps", f"{self.lost_steps} (computed again after resuming)"),
            ("cut writes", f"{self.cut_writes} half-written temp checkpoints left by kills, each removed at the next "
                           "start; the checkpoint it replaced stayed whole"),
            ("leaked temp files", f"{len(self.leaked)}" + (f": {', '.join(self.leaked[:5])}" if self.leaked else "")),
            ("train/loss", f"{checked - len(self.mismatched_steps)}/{self.steps} steps bit-identical to the "
                           "uninterrupted run" + (f"; missing {self.missing_steps[:10]}" if self.missing_steps else "")
                           + (f"; differ at {self.mismatched_steps[:10]}" if self.mismatched_steps else "")),
            ("errors", "; ".join(self.failures) or "none"),
            ("wall time", f"{seconds:.0f} s"),
            ("verdict", "PASS" if self.passed else "FAIL"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def filesystem_of(path: Path) -> tuple[str, str]:
    """(mount point, type) of the filesystem holding `path`, from /proc/mounts (the longest matching mount)."""
    path = path.resolve()
    best = ("/", "?")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and (path == Path(parts[1]) or Path(parts[1]) in path.parents):
            if len(parts[1]) >= len(best[0]):
                best = (parts[1], parts[2])
    return best


class SeparateTmpdir:
    """A $TMPDIR for the children on another filesystem than `run_root`: the given dir, else a tmpfs mounted here
    (root only), else a dir in /dev/shm when that is another filesystem, else a plain dir on the same one."""

    def __init__(self, run_root: Path, given: Optional[Path]) -> None:
        self.run_root, self.given, self.mounted = run_root, given, None
        self.path: Path = run_root / "tmpdir"

    def __enter__(self) -> Path:
        device = self.run_root.stat().st_dev
        if self.given is not None:
            self.path = self.given
            self.path.mkdir(parents=True, exist_ok=True)
            return self.path
        self.path.mkdir()
        mount = ["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", str(self.path)]
        if os.geteuid() == 0 and subprocess.run(mount, capture_output=True).returncode == 0:
            self.mounted = self.path
        elif Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) and os.stat("/dev/shm").st_dev != device:
            self.path = Path(tempfile.mkdtemp(prefix="gptlab-drill-", dir="/dev/shm"))
        return self.path

    def __exit__(self, *exc: object) -> None:
        if self.mounted is not None:
            done = subprocess.run(["umount", "-l", str(self.mounted)], capture_output=True, text=True)
            if done.returncode != 0:  # said, not hidden: a tmpfs left mounted in the user's workdir
                print(f"gptlab: the drill's tmpfs at {self.mounted} could not be unmounted ({done.stderr.strip()}); "
                      f"`umount -l {self.mounted}` removes it.", file=sys.stderr)
        elif self.given is None and self.path.parent == Path("/dev/shm"):
            shutil.rmtree(self.path, ignore_errors=True)


def step_losses(run_dir: Path) -> dict[int, list[float]]:
    """steps done (1 for the first step) -> every train/loss logged for it, over all event files of the run (a
    resumed step logs again)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    losses: dict[int, list[float]] = {}
    for path in event_files(run_dir):
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        if "train/loss" in acc.Tags()["scalars"]:
            offset = steps_done_offset(path)
            for event in acc.Scalars("train/loss"):
                losses.setdefault(event.step + offset, []).append(event.value)
    return losses


def temp_files(directory: Path) -> list[Path]:
    """gptlab.atomic's temp files (`.<name>.<random>.tmp`) in the run dir's top level and checkpoints/."""
    return [p for d in (directory, directory / "checkpoints") if d.is_dir() for p in d.iterdir()
            if p.name.startswith(".") and p.name.endswith(".tmp")]


def all_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()] if directory.is_dir() else []


class Drill:
    def __init__(self, root: Path, tmpdir: Path, steps: int, checkpoint_every: int, seed: int,
                 launch: Launch = start_job) -> None:
        self.root, self.tmpdir, self.steps, self.rng, self.launch = root, tmpdir, steps, random.Random(seed), launch
        self.overrides = [*RUN_OVERRIDES, f"trainer.max_steps={steps}", f"seed={seed}",
                          f"trainer.val_check_interval={4 * checkpoint_every}",
                          f"callbacks.periodic_checkpoint.every_n_train_steps={checkpoint_every}"]
        self.env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
        self.attempt = 0
        self.checkpoint_every = checkpoint_every

    def start(self, run_dir: Path, *extra: str) -> Any:
        self.attempt += 1
        cmd = [sys.executable, str(TRAIN), f"hydra.run.dir={run_dir}", *self.overrides, *extra]
        return self.launch(cmd, REPO, self.env, self.root / f"attempt{self.attempt:03d}.log")

    def log_of(self, attempt: int) -> str:
        return (self.root / f"attempt{attempt:03d}.log").read_text(errors="replace")

    def reference(self) -> dict[int, float]:
        """The uninterrupted run's loss per step."""
        proc = self.start(self.root / "reference")
        if proc.wait() != 0:
            raise RuntimeError(f"the uninterrupted reference run failed:\n{self.log_of(self.attempt)[-3000:]}")
        return {step: values[-1] for step, values in step_losses(self.root / "reference").items()}

    def held_write(self, write: int) -> tuple[Path, list[str]]:
        """The marker file the run creates once it holds its `write`-th checkpoint write open, and the overrides
        that add the holding callback."""
        marker = self.root / f"holding{self.attempt + 1:03d}"
        node = "+callbacks.drill_hold"
        return marker, [f"{node}._target_={__name__}.HoldCheckpointWrite", f"{node}.marker={marker}",
                        f"{node}.write={write}"]

    def held_step(self, step: int) -> tuple[Path, list[str]]:
        """The marker file the run creates once optimizer step `step` is done (and it holds there), and the
        overrides that add the holding callback."""
        marker = self.root / f"holding{self.attempt + 1:03d}"
        node = "+callbacks.drill_hold"
        return marker, [f"{node}._target_={__name__}.HoldAfterStep", f"{node}.marker={marker}", f"{node}.step={step}"]

    def kill_step(self, resumed_from: int, kills_left: int) -> Optional[int]:
        """A random step to kill the next attempt at, after the one it resumes from; None: no step is left before
        the end. Drawn from an even share of the steps left, so every kill lands before the run ends."""
        span = max(1, (self.steps - 1 - resumed_from) // kills_left)
        step = resumed_from + self.rng.randint(1, span)
        return step if step < self.steps else None

    def kill_during_a_checkpoint_write(self, proc: Any, marker: Path, checkpoints: Path) -> bool:
        """SIGKILL once the run holds a checkpoint write open; checks that the write is under way (a temp file
        beside the checkpoint, gptlab's way, or a new file in $TMPDIR, Lightning's own staging)."""
        staged_before = set(os.listdir(self.tmpdir))
        while proc.poll() is None and not marker.exists():
            time.sleep(0.01)
        if proc.poll() is not None:
            return False
        writing = any(e.name.endswith(".tmp") and e.name.startswith(".") for e in os.scandir(checkpoints)) \
            or bool(set(os.listdir(self.tmpdir)) - staged_before)
        proc.send_signal(signal.SIGKILL)
        if not writing:
            raise RuntimeError(f"attempt {self.attempt} held a checkpoint write but no temp file of it was found")
        return True

    @staticmethod
    def kill_when(proc: Any, marker: Path) -> bool:
        """SIGKILL once the run holds at its aimed step (it made `marker`); False if it ended first (a failure)."""
        while proc.poll() is None and not marker.exists():
            time.sleep(0.01)
        if proc.poll() is not None:
            return False
        proc.send_signal(signal.SIGKILL)
        return True

    def run(self, kills: int, aimed_share: float) -> DrillResult:
        result = DrillResult(self.steps)
        reference = self.reference()
        run_dir = self.root / "run"
        checkpoints = run_dir / "checkpoints"
        tmp_before = {str(p) for p in all_files(self.tmpdir)}
        for i in range(kills + 1):
            newest = newest_loadable_checkpoint(run_dir) if run_dir.is_dir() else None
            resumed_from = int(read_checkpoint(newest, mmap=True)["global_step"]) if newest else 0
            step = None if i == kills else self.kill_step(resumed_from, kills - i)
            last_kill = step is None
            # A write to aim at: the attempt has its 2nd or 3rd checkpoint write ahead of it.
            aimed = not last_kill and self.rng.random() < aimed_share \
                and self.steps - resumed_from > 4 * self.checkpoint_every
            marker, hold = self.held_write(self.rng.randint(2, 3)) if aimed else \
                self.held_step(step) if not last_kill else (None, [])
            proc = self.start(run_dir, "resume=auto", *hold)
            if last_kill:
                proc.wait()
                killed = False
            elif aimed:
                killed = self.kill_during_a_checkpoint_write(proc, marker, checkpoints)
            else:
                killed = self.kill_when(proc, marker)
            proc.wait()
            text = self.log_of(self.attempt)
            if i > 0:
                if "resume=auto: continuing from" in text and "Traceback" not in text:
                    result.resumes += 1
                else:
                    result.failures.append(f"attempt {self.attempt} did not resume (see {self.root}/"
                                           f"attempt{self.attempt:03d}.log)")
            if not killed:
                if proc.returncode != 0:
                    result.failures.append(f"attempt {self.attempt} exited {proc.returncode}: {text[-500:]}")
                if not last_kill:  # the run ended before its aimed event (see its log): the drill ends early
                    result.failures.append(f"attempt {self.attempt} ended before its aimed kill (see {self.root}/"
                                           f"attempt{self.attempt:03d}.log)")
                    break
                if i < kills:  # no step was left for the kills still to come
                    break
                continue
            result.kills += 1
            result.aimed_kills += aimed
            result.cut_writes += len(temp_files(run_dir))
            done = max(step_losses(run_dir), default=0)
            newest = newest_loadable_checkpoint(run_dir)
            resumed_from_step = int(read_checkpoint(newest, mmap=True)["global_step"]) if newest else 0
            result.lost_steps += max(0, done - resumed_from_step)
        if result.kills < kills:
            result.failures.append(f"the run finished after {result.kills} of {kills} kills; give more steps")
        result.leaked = [str(p) for p in all_files(self.tmpdir) if str(p) not in tmp_before]
        result.leaked += [str(p) for p in temp_files(run_dir)]
        logged = step_losses(run_dir)
        for step in range(1, self.steps + 1):
            if step not in logged:
                result.missing_steps.append(step)
            elif any(value != reference[step] for value in logged[step]):
                result.mismatched_steps.append(step)
        return result


class _HeldOpen:
    """Put into a checkpoint, it holds torch.save while pickling it: the temp file exists, nothing is renamed."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204 (pickle's protocol)
        Path(self.marker).touch()
        time.sleep(HOLD_SECONDS)  # the drill's SIGKILL comes first; this bound only keeps an orphan from waiting on
        raise RuntimeError(f"the fault drill did not kill this run within {HOLD_SECONDS} s of {self.marker}")


class HoldAfterStep(Callback):
    """Drill-only (added with +callbacks.drill_hold): once optimizer step `step` is done, creates `marker` and holds
    the run there, so the drill's SIGKILL lands after that step whatever the machine's load."""

    def __init__(self, marker: str, step: int) -> None:
        self.marker, self.step = marker, step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step == self.step:
            Path(self.marker).touch()
            time.sleep(HOLD_SECONDS)  # the drill's SIGKILL comes first (see _HeldOpen)
            raise RuntimeError(f"the fault drill did not kill this run within {HOLD_SECONDS} s of {self.marker}")


class HoldCheckpointWrite(Callback):
    """Drill-only (added with +callbacks.drill_hold): holds the run's `write`-th checkpoint write open (see
    _HeldOpen) and creates `marker`, so the drill kills it mid-write whatever the machine's load."""

    def __init__(self, marker: str, write: int) -> None:
        self.marker, self.write, self.writes = marker, write, 0

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        self.writes += 1
        if self.writes == self.write:
            checkpoint["fault_drill_hold"] = _HeldOpen(self.marker)


def run_drill(kills: int = 20, seed: int = 0, steps: Optional[int] = None, checkpoint_every: int = 4,
              aimed_share: float = 0.4, workdir: Optional[Path] = None, tmpdir: Optional[Path] = None,
              keep: bool = False, launch: Launch = start_job) -> tuple[DrillResult, float]:
    """Run the drill; returns its result and wall seconds. `steps` defaults to enough for every kill to land;
    `launch` starts each attempt (gptlab.tools.drill_launch)."""
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="fault-drill-", dir=workdir))
    steps = steps or max(40, 6 * checkpoint_every * (kills + 1))
    result = None
    try:
        with SeparateTmpdir(root, tmpdir) as children_tmp:
            run_fs, tmp_fs = filesystem_of(root), filesystem_of(children_tmp)
            same = root.stat().st_dev == children_tmp.stat().st_dev
            drill = Drill(root, children_tmp, steps, checkpoint_every, seed, launch)
            result = drill.run(kills, aimed_share)
            result.layout = (f"run dir on {run_fs[1]} ({run_fs[0]}), $TMPDIR on {tmp_fs[1]} ({children_tmp})"
                             + ("; the SAME filesystem: pass tmpdir=<dir on another one>" if same else
                                ", another filesystem"))
    finally:
        # A failed drill keeps the logs its table names; one that raised or was interrupted leaves nothing of its own.
        if not keep and (result is None or result.passed):
            shutil.rmtree(root, ignore_errors=True)
    return result, time.perf_counter() - started
