"""A lost DDP rank ends the job with one message naming the rank and the step, not a hang or a gloo traceback.

Lightning's launcher watches the ranks it started and, when one exits non-zero, SIGKILLs every process, rank 0
included: the job dies silently with exit -9, also when the rank only stopped the way all ranks were stopping (a
preemption, a non-finite loss, which every rank reports at the same step and rank 0 prints). gptlab's watcher
(`watch_ranks`, installed in its place by gptlab.train.hydra_ddp) tells the two apart: a rank killed by a signal, or
one still gone after a grace period while rank 0 runs on, is lost: it prints the message, kills the other ranks
and ends rank 0 with exit code 1. The checkpoints written before are whole (gptlab.train.checkpoint_io).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Optional

ORDERLY_EXIT_CODES = {1, 2, 128 + signal.SIGTERM, 128 + signal.SIGUSR1}  # gptlab's own agreed stops
GRACE_SECONDS = 20.0  # an orderly rank stop: rank 0 stops at the same step and exits well within this
POLL_SECONDS = 0.5


class RankWatch:
    """What the watcher and the entry script's error handler share: the trainer (for its step) and the verdict."""

    def __init__(self) -> None:
        self.trainer: Optional[Any] = None
        self.lost: Optional[str] = None  # the message, once a rank is found lost

    def step(self) -> str:
        return "?" if self.trainer is None else str(self.trainer.global_step)


WATCH = RankWatch()


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"


def _stop_all(children: list[subprocess.Popen], message: str) -> None:
    WATCH.lost = message
    print(f"gptlab: {message}", file=sys.stderr, flush=True)
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
    os._exit(1)  # the main thread may be blocked in a collective that will never complete


def _watch(children: list[subprocess.Popen]) -> None:
    first_seen: dict[int, float] = {}
    while True:
        time.sleep(POLL_SECONDS)
        codes = [child.poll() for child in children]
        if all(code == 0 for code in codes):
            return
        for rank, (child, code) in enumerate(zip(children, codes), start=1):
            if not code:
                continue
            first_seen.setdefault(rank, time.monotonic())
            orderly = code in ORDERLY_EXIT_CODES
            if not orderly or time.monotonic() - first_seen[rank] > GRACE_SECONDS:
                _stop_all(children, f"rank {rank} (pid {child.pid}) {describe_exit(code)} at step {WATCH.step()}; "
                                    "the other ranks were stopped. The checkpoints written before it are whole: "
                                    "continue with resume=auto hydra.run.dir=<this run dir>.")


def watch_ranks(child_processes: list[subprocess.Popen]) -> None:
    """Replaces lightning's `_launch_process_observer` (same argument): start the watcher thread."""
    threading.Thread(target=_watch, args=(child_processes,), daemon=True, name="gptlab-rank-watch").start()


def collective_failure_message(err: BaseException) -> Optional[str]:
    """For an exception out of a multi-rank run: the one line to print when a collective failed because another
    rank is gone (waiting briefly for the watcher, which names the rank); None when it is another error."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    text = f"{type(err).__name__}: {err}"
    if world < 2 or not any(k in text for k in ("gloo", "Gloo", "NCCL", "Connection", "DistBackendError",
                                                "DistNetworkError", "Socket", "timed out", "peer")):
        return None
    deadline = time.monotonic() + 3 * POLL_SECONDS
    while WATCH.lost is None and time.monotonic() < deadline:
        time.sleep(0.1)  # rank 0's watcher names the lost rank and exits the process itself
    first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    return (f"lost contact with another rank at step {WATCH.step()} ({first}); this rank stops too. The "
            "checkpoints written before are whole: continue with resume=auto hydra.run.dir=<this run dir>.")
