"""The preemption signal flag, importable before torch: src/train.py installs it first thing, so a DDP rank
signalled while it is still importing records the signal instead of dying with half a job (stdlib only).

Only the process that installed it keeps it: a forked child (a tokenizing Pool worker, a DataLoader worker, a
library's worker) gets the default SIGTERM/SIGUSR1 back at once (`os.register_at_fork`), because a worker that only
records SIGTERM cannot be ended by `Pool.terminate()` and hangs its parent. One hook covers every fork, whoever
starts it, where per-pool initializers would miss the pools of libraries and replace Lightning's DataLoader
`worker_init_fn` (which seeds the workers). Spawned and exec'd processes start with default handlers anyway.
The signals stay blocked across the fork until the child has its default handlers back: a SIGTERM that reached the
child before (Pool.terminate right after starting its workers) would otherwise be taken by the parent's handler
and lost, and the worker, waiting on the pool's queue lock that the parent holds, would hang the parent's join.

A signal is answered at once, also while a step of minutes runs inside a kernel (when no Python handler runs): the
C-level handler writes the signal's number to a pipe (signal.set_wakeup_fd), and a thread waiting on it writes one
line to stderr (os.write: no lock that the interrupted code could hold) saying what will happen and when. The stop
itself still comes at the next step boundary: a kernel cannot be cut, and a step cut midway has nothing to save."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Any, Iterator

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # SIGUSR1: SLURM's `--signal=SIGUSR1@90` before requeue


class SignalFlag:
    """The last preemption signal this process received (0: none). The handler does nothing else: a handler that
    logs, saves or communicates can deadlock the code it interrupts (Lightning's broadcasts from one)."""

    def __init__(self) -> None:
        self.signum = 0
        self._previous: dict[int, Any] = {}
        self._mask_before_fork: set[int] | None = None
        self._held_mask: set[int] | None = None  # the mask before hold_for_children
        self._wakeup: tuple[int, int] | None = None  # the pipe the C handler writes signal numbers to (read, write)
        self._sharers = 0  # `shared` bodies running: runs in threads of this process that each act on a signal
        self._taken_while_shared = False

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum

    def consume(self) -> int:
        """The recorded signal, cleared: the next run in this process (a sweep's next job, a test) starts clean.
        Inside `shared` it stays for the other runs and is cleared when the last body ends."""
        signum = self.signum
        if self._sharers:
            self._taken_while_shared = self._taken_while_shared or bool(signum)
        else:
            self.signum = 0
        return signum

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Several runs at once in threads of this process (hydra/launcher=fused): one signal reaches the process
        once, and each run must act on it (save its last.ckpt and stop), so the first to act does not clear it."""
        self._sharers += 1
        try:
            yield
        finally:
            self._sharers -= 1
            if not self._sharers and self._taken_while_shared:
                self._taken_while_shared, self.signum = False, 0

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> None:
        if not self.installed:
            self.signum = 0  # a signal from before (a finished job of this process) is not for this one
            self._previous = {s: signal.signal(s, self._handle) for s in PREEMPTION_SIGNALS}
            self._answer_at_once()
            # A DDP rank started with them blocked (hold_for_children): one sent while it started is taken now.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, PREEMPTION_SIGNALS)

    def hold_for_children(self) -> None:
        """In a launcher about to start processes whose first act is `install` (DDP ranks > 0, src/train.py): the
        preemption signals wait, blocked, until `release`. A child inherits the block across exec, so a signal
        that reaches it while Python starts and imports is recorded by its handler, not its death (which the
        rank watcher would have to call a lost rank)."""
        if self._held_mask is None:
            self._held_mask = signal.pthread_sigmask(signal.SIG_BLOCK, PREEMPTION_SIGNALS)

    def release(self) -> None:
        """The launcher's children are started: its own signals are delivered again (one that came meanwhile now)."""
        mask, self._held_mask = self._held_mask, None
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}
        self._stop_answering()

    def _answer_at_once(self) -> None:
        """Start the thread that says at once that a signal was received (see the module docstring); not where
        another wakeup fd is set (an asyncio loop's), which is left alone."""
        if threading.current_thread() is not threading.main_thread() or self._wakeup is not None:
            return
        read, write = os.pipe()
        os.set_blocking(write, False)
        theirs = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        if theirs != -1:  # someone else's: put back
            signal.set_wakeup_fd(theirs)
            os.close(read), os.close(write)
            return
        self._wakeup = (read, write)
        threading.Thread(target=_answer, args=(read,), name="gptlab-signal-answer", daemon=True).start()

    def _stop_answering(self) -> None:
        if self._wakeup is not None and threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(-1)
            os.close(self._wakeup[1])  # the thread reads the end of the pipe and ends
            self._wakeup = None

    def block_for_fork(self) -> None:
        """Runs before every fork: the preemption signals wait (in the parent too, for the instant of the fork)."""
        if self.installed:
            self._mask_before_fork = signal.pthread_sigmask(signal.SIG_BLOCK, PREEMPTION_SIGNALS)

    def unblock_after_fork(self) -> None:
        mask, self._mask_before_fork = self._mask_before_fork, None
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a signal that came meanwhile is handled now

    def forget_in_child(self) -> None:
        """Runs in every forked child: the flag is the parent's; the child dies of SIGTERM like any process, also
        of one sent during the fork (it was blocked until now)."""
        if self._wakeup is not None:  # the parent's pipe: the child's signals are not the parent's to answer
            with contextlib.suppress(ValueError):  # forked from another thread than the main one
                signal.set_wakeup_fd(-1)
            for fd in self._wakeup:
                os.close(fd)
            self._wakeup = None
        if self.installed:
            for signum in PREEMPTION_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            self._previous, self.signum = {}, 0
        self.unblock_after_fork()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Installed for the body; restored after only if this call installed it."""
        ours = not self.installed
        self.install()
        try:
            yield
        finally:
            if ours:
                self.restore()


def _answer(read: int) -> None:
    """The thread of `SignalFlag._answer_at_once`: one line per preemption signal, the moment it arrives."""
    received = 0
    while True:
        try:
            numbers = os.read(read, 64)
        except OSError:
            return
        if not numbers:
            os.close(read)
            return
        for signum in numbers:
            if signum in PREEMPTION_SIGNALS:
                received += 1
                os.write(2, answer(signum, received).encode())


def answer(signum: int, received: int) -> str:
    """What a process says the moment a preemption signal reaches it (`received`: how many so far)."""
    name = signal.Signals(signum).name
    if received > 1:
        return (f"{name} received again (gptlab): still stopping at the end of the step in progress; SIGKILL stops "
                "at once without saving.\n")
    return (f"{name} received (gptlab): stopping at the end of the step in progress, which a signal cannot cut "
            "inside a kernel, and saving last.ckpt there (before training: at the next unit of data preparation, "
            "nothing to save). SIGKILL stops at once without saving.\n")


FLAG = SignalFlag()  # one per process


def stop_if_signalled(what: str) -> None:
    """Before training starts there is no checkpoint to save: long work there (tokenizing a corpus, hashing its
    shards) calls this between units and ends on a recorded signal at once, rather than after the work and a first
    training step."""
    if FLAG.signum:
        from gptlab.errors import StoppedBySignal

        raise StoppedBySignal(FLAG.consume(), what)


def agreed_signal(signum: int, device: Any) -> int:
    """The largest signal number that any rank holds (0: none), by one blocking all-reduce on `device` that every
    rank must join; `signum` itself outside a process group of several ranks. (torch is imported here only: this
    module is imported before torch.)"""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return signum
    flags = torch.tensor([signum], dtype=torch.int32, device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return int(flags.item())


def requeue_slurm_job() -> None:
    """Under SLURM, put the job back in the queue (what `sbatch --requeue --signal=SIGUSR1@90` expects): after a
    SIGUSR1 stop, whether training had started (a preemption checkpoint) or not (nothing to save)."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        array = os.environ.get("SLURM_ARRAY_JOB_ID")
        job = f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array else job
        subprocess.run(["scontrol", "requeue", job], check=False)


os.register_at_fork(before=FLAG.block_for_fork, after_in_parent=FLAG.unblock_after_fork,
                    after_in_child=FLAG.forget_in_child)
