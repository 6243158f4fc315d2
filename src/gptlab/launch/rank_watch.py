"""A lost DDP rank ends the job with one message naming the rank and the step, not a hang or a gloo traceback.

Lightning's launcher watches the ranks it started and, when one exits non-zero, SIGKILLs every process, rank 0
included: the job dies silently with exit -9, also when the rank only stopped the way all ranks were stopping (a
preemption, a non-finite loss, which every rank reports at the same step and rank 0 prints). gptlab's watcher
(`watch_ranks`, installed in its place by gptlab.lightning_internals) tells the two apart: a rank killed by a signal, or
one still gone after a grace period while rank 0 runs on, is lost: it prints the message, kills the other ranks
and ends rank 0 with exit code 1. A rank killed by SIGKILL is named as out of memory (the kernel's OOM killer sends
it), and resume is offered only where a checkpoint was written (those are whole: gptlab.checkpoint.atomic_io).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from gptlab.launch import death_watch
from gptlab.launch.continuing import continue_words
from gptlab.launch.out_of_memory import killed_for_memory
from gptlab.signals import FLAG

ORDERLY_EXIT_CODES = {1, 2, 128 + signal.SIGTERM, 128 + signal.SIGUSR1}  # gptlab's own agreed stops
GRACE_SECONDS = 20.0  # an orderly rank stop: rank 0 stops at the same step and exits well within this
POLL_SECONDS = 0.5
COLLECTIVE_ERROR_WORDS = ("gloo", "Gloo", "NCCL", "Connection", "DistBackendError", "DistNetworkError", "Socket",
                          "timed out", "peer")


class RankWatch:
    """What the watcher thread and the entry script's error handler share: the trainer (for its step and world
    size), the ranks rank 0 started, and whether a lost rank was already reported (exactly one message)."""

    def __init__(self) -> None:
        self.trainer: Optional[Any] = None
        self.children: list[subprocess.Popen] = []  # ranks > 0 on this node, in rank 0 (Lightning's launcher)
        self._first_seen: dict[int, float] = {}
        self._lock = threading.Lock()

    def start(self, trainer: Any) -> None:
        """A new fit: its trainer; the ranks are registered when Lightning launches them (watch_ranks)."""
        self.trainer, self.children, self._first_seen = trainer, [], {}

    def step(self) -> str:
        return "?" if self.trainer is None else str(self.trainer.global_step)

    def world_size(self) -> int:
        return int(os.environ.get("WORLD_SIZE", "1")) if self.trainer is None else self.trainer.world_size

    def lost_rank(self) -> Optional[str]:
        """The message for a rank that is lost now: killed by a signal, exited with a code gptlab's orderly stops
        never use, or gone for longer than the grace period (rank 0 stops at the same step, well within it)."""
        for rank, child in enumerate(self.children, start=1):
            code = child.poll()
            if not code:
                continue
            self._first_seen.setdefault(rank, time.monotonic())
            if code not in ORDERLY_EXIT_CODES or time.monotonic() - self._first_seen[rank] > GRACE_SECONDS:
                return (f"rank {rank} (pid {child.pid}) {describe_exit(code)} at step {self.step()}"
                        f"{self.likely_cause(code)}; the other ranks were stopped. {self.how_to_continue()}")
        return None

    def likely_cause(self, code: int) -> str:
        """A SIGKILL nobody sent on purpose is the kernel's OOM killer: with the memory way out."""
        if code != -signal.SIGKILL:
            return ""
        batch = getattr(getattr(self.trainer, "datamodule", None), "batch_size", None)
        return f", {killed_for_memory(batch, self.world_size())}"

    def how_to_continue(self) -> str:
        """Resume only where a checkpoint was written; a sweep's job continues with its sweep."""
        dirs = [Path(d) for d in (getattr(c, "dirpath", None) for c in getattr(self.trainer, "checkpoint_callbacks",
                                                                                 [])) if d]
        saved = any(any(d.glob("*.ckpt")) for d in dirs if d.is_dir())
        root = getattr(self.trainer, "default_root_dir", None)
        return continue_words(Path(root) if root else None, saved)

    def stop_all(self, message: str) -> None:
        """Prints `message` once, SIGKILLs the other ranks and ends this process with exit code 1 (its main thread
        may be blocked in a collective that will never complete, so no unwinding)."""
        with self._lock:  # the watcher thread and the main thread may both get here; the second waits for exit
            print(f"gptlab: {message}", file=sys.stderr, flush=True)
            death_watch.bye()  # this exit was said: the main process's watcher keeps quiet
            for child in self.children:
                if child.poll() is None:
                    child.send_signal(signal.SIGKILL)
            os._exit(1)


WATCH = RankWatch()


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"


def _watch() -> None:
    while True:
        time.sleep(POLL_SECONDS)
        if all(child.poll() == 0 for child in WATCH.children):
            return
        message = WATCH.lost_rank()
        if message:
            WATCH.stop_all(message)


def watch_ranks(child_processes: list[subprocess.Popen]) -> None:
    """Replaces lightning's `_launch_process_observer` (same argument), called once the ranks are started: start
    the watcher thread, and let this process's preemption signals through again (job_subprocess_cmd held them)."""
    FLAG.release()
    WATCH.children = child_processes
    threading.Thread(target=_watch, daemon=True, name="gptlab-rank-watch").start()


def collective_failure_message(err: BaseException) -> Optional[str]:
    """For an exception out of a multi-rank run: the one line to print when a collective failed because another
    rank is gone; None when it is another error. In rank 0, a lost rank it started is named (and the process ends
    here); another rank only knows that contact was lost."""
    text = f"{type(err).__name__}: {err}"
    if WATCH.world_size() < 2 or not any(k in text for k in COLLECTIVE_ERROR_WORDS):
        return None
    deadline = time.monotonic() + 4 * POLL_SECONDS
    while WATCH.children and time.monotonic() < deadline:
        message = WATCH.lost_rank()
        if message:
            WATCH.stop_all(message)
        time.sleep(0.1)
    first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    return (f"lost contact with another rank at step {WATCH.step()} ({first}); this rank stops too. "
            f"{WATCH.how_to_continue()}")
