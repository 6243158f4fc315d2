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
itself still comes at the next step boundary: a kernel cannot be cut, and a step cut midway has nothing to save.
Unless that boundary comes too late: a scheduler SIGKILLs a job its grace time (typically 30-120 s) after the signal,
so a step still running `grace_s` after it (or one that, by the measured step time, cannot end within it) ends
the process from that thread at once, without a save, naming the last checkpoint on disk (`overdue`).

Before training starts (`at_once`: the entry's imports and setup, in one process) there is nothing to save, so the
handler itself stops the process at once (gptlab.entry_signals.stop) rather than at the next check."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Iterator

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # SIGUSR1: SLURM's `--signal=SIGUSR1@90` before requeue


class SignalFlag:
    """The last preemption signal this process received (0: none). The handler does nothing else: a handler that
    logs, saves or communicates can deadlock the code it interrupts (Lightning's broadcasts from one)."""

    def __init__(self) -> None:
        self.signum = 0
        self.fits = 0  # fits started in this process: a grace deadline belongs to the fit its signal reached
        self._previous: dict[int, Any] = {}
        self._mask_before_fork: set[int] | None = None
        self._held_mask: set[int] | None = None  # the mask before hold_for_children
        self._wakeup: tuple[int, int] | None = None  # the pipe the C handler writes signal numbers to (read, write)
        self._sharers = 0  # `shared` bodies running: runs in threads of this process that each act on a signal
        self._taken_while_shared = False
        self.at_once = False  # before training, in one process: the handler stops the process itself
        # Set by training (callbacks/preemption.py) for the grace deadline: the seconds a scheduler waits before its
        # SIGKILL (None: no deadline), when the step in progress began (None: between steps, e.g. saving), the
        # measured seconds of a step, and what ends the process when the step is overdue (says why and exits).
        self.grace_s: float | None = None
        self.busy_since: float | None = None
        self.step_seconds: float | None = None
        self.overdue: Callable[[int, str], None] | None = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum
        if self.stops_at_once:
            from gptlab.entry_signals import stop

            if signum == signal.SIGUSR1:
                requeue_slurm_job()
            stop(signum, frame, "starting up, before training started (nothing to save)", "before training started")

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
        """Whether this flag's handler is the one in place: where another hand has replaced it since (a library, a
        test harness), it is not, and `install`/`active` put it back rather than trust their own record."""
        return bool(self._previous) and signal.getsignal(signal.SIGTERM) == self._handle

    def setting_up(self) -> None:
        """Before training (imports, setup): a signal stops the process at once, where it is not a DDP rank > 0
        (whose stop the ranks agree on) nor a fused sweep's member thread."""
        self.at_once = self.main_process()
        if self.stops_at_once and self.signum:  # one that came meanwhile (between a sweep's jobs)
            self._handle(self.signum, None)

    def training(self) -> None:
        """From here a signal is a flag that training acts on at its next step boundary."""
        self.at_once = False

    @property
    def stops_at_once(self) -> bool:
        return self.at_once and not self._sharers

    def install(self) -> None:
        if not self.installed:
            self.signum = 0  # a signal from before (a finished job of this process) is not for this one
            self._previous = {s: signal.signal(s, self._handle) for s in PREEMPTION_SIGNALS}
            self._answer_at_once()
            # A DDP rank started with them blocked (hold_for_children): one sent while it started is taken now.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, PREEMPTION_SIGNALS)

    @staticmethod
    def main_process() -> bool:
        """Not a DDP rank > 0 (whose stop the ranks agree on), and not a thread of a fused sweep's member."""
        return all(os.environ.get(key, "0") == "0" for key in ("RANK", "LOCAL_RANK", "NODE_RANK")) and \
            threading.current_thread() is threading.main_thread()

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
        self.at_once, self.grace_s, self.busy_since, self.overdue = False, None, None, None
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
    """The thread of `SignalFlag._answer_at_once`: one line per preemption signal, the moment it arrives, and the
    grace deadline of the step in progress (module docstring)."""
    received, deadline, signalled = 0, None, (0, 0.0, -1)
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            if not select.select([read], [], [], timeout)[0]:  # the deadline passed
                deadline = _check_deadline(*signalled)
                continue
            numbers = os.read(read, 64)
        except OSError:
            return
        if not numbers:
            os.close(read)
            return
        for signum in numbers:
            if signum in PREEMPTION_SIGNALS and not FLAG.stops_at_once:  # at once: the handler says it
                if signalled[2:] != (FLAG.fits,):  # the first signal of this fit (one process can fit many times)
                    received = 0
                received += 1
                if received == 1:
                    signalled = (signum, time.monotonic(), FLAG.fits)
                    deadline = _start_deadline(*signalled)  # overdue at once: said, and the process ends
                os.write(2, answer(signum, received, FLAG.grace_s if deadline is not None else None).encode())


def _start_deadline(signum: int, at: float, fit: int) -> float | None:
    """When the step in progress will be overdue (None: no deadline). A step that cannot end within the grace (a
    grace of 0, or by the measured step time) is overdue at once."""
    grace, busy, per = FLAG.grace_s, FLAG.busy_since, FLAG.step_seconds
    if grace is None or FLAG.overdue is None:
        return None
    if busy is not None and grace == 0:
        _end_overdue(signum, "a step was in progress")
    if busy is not None and per is not None and busy + per - at > grace:
        _end_overdue(signum, f"a step takes ~{per:.0f} s here and the one in progress began {at - busy:.0f} s before "
                             "the signal, so it cannot end in time")
    return at + grace


def _check_deadline(signum: int, at: float, fit: int) -> float | None:
    """At the deadline: overdue if still inside the step that was running at the signal (or a later one); between
    steps (a save in progress) the save is let finish. A fit that ended meanwhile (stopped by that signal, in a
    process that goes on: a sweep's jobs, a test suite's worker) takes its deadline with it."""
    if fit != FLAG.fits or FLAG.overdue is None:
        return None
    if FLAG.busy_since is None:
        return time.monotonic() + 1.0  # saving: look again
    _end_overdue(signum, f"the step in progress had not ended {time.monotonic() - at:.0f} s after the signal")
    return None


def _end_overdue(signum: int, why: str) -> None:
    overdue = FLAG.overdue
    if overdue is not None:
        overdue(signum, why)  # says so and ends the process


def answer(signum: int, received: int, grace_s: float | None = None) -> str:
    """What a process says the moment a preemption signal reaches it (`received`: how many so far; `grace_s`: the
    grace deadline set for the step in progress, if any)."""
    name = signal.Signals(signum).name
    if received > 1:
        return (f"{name} received again (gptlab): still stopping at the end of the step in progress; SIGKILL stops "
                "at once without saving.\n")
    grace = "" if grace_s is None else \
        f" (if the step has not ended {grace_s:g} s from now, callbacks.preemption_checkpoint.grace_seconds, the " \
        "run stops then without a save)"
    return (f"{name} received (gptlab): stopping at the end of the step in progress, which a signal cannot cut "
            f"inside a kernel, and saving last.ckpt there{grace} (before training: at the next unit of data "
            "preparation, nothing to save). SIGKILL stops at once without saving.\n")


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
