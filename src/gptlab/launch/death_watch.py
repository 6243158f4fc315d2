"""A run whose main process dies abruptly (the kernel's OOM killer, a SIGKILL from outside, a crash) says so in one
line, instead of the shell's bare "Killed" (issue 46; a lost DDP rank > 0 is gptlab.launch.rank_watch's).

The training process starts a tiny watcher (this file run by `python -S`: the standard library only, no torch) that
holds the read end of a pipe whose write end only the training process holds: forked children (DataLoader workers)
close their copy at once, and exec'd ones (DDP ranks) never get it. Every orderly exit writes BYE first (the entry
script's `with watching(cfg)`, rank_watch's own exit); the pipe closing without it means the process died without
running any Python. The watcher then compares the kernel's OOM-kill counters (`oom_kill` in /proc/vmstat and in the
process's cgroup v2 memory.events) with their values at the start and prints the words the training process gave
it: out of memory with its ways out where a counter rose, else killed from outside or crashed; and resume only where
a checkpoint was written. In its own session and ignoring SIGINT, SIGTERM, SIGUSR1 and SIGUSR2, it leaves a Ctrl-C or
a scheduler's signal to the training process, and ends with the pipe: it never outlives the run and writes no file.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

from gptlab.launch.death_watcher import BYE, VMSTAT, cgroup_events

WATCHER = str(Path(__file__).with_name("death_watcher.py"))


class Watch:
    """The training process's end of one watcher: the pipe's write end and the watcher process."""

    def __init__(self, spec: dict[str, Any]) -> None:
        read, self.write = os.pipe()  # not inheritable: an exec'd child (a DDP rank) does not get the write end
        # Its own session: a Ctrl-C in the terminal, or a signal to the run's process group, reaches the training
        # process only (which answers it), also before the watcher has set its signals aside.
        # The spec goes in on stdin, not argv: `ps` stays short, and a `pkill -f <the run's command>` (which the
        # spec's resume line repeats) does not kill the watcher along with the run.
        self.process = subprocess.Popen([sys.executable, "-S", "-I", WATCHER, str(read)], pass_fds=(read,),
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)
        os.close(read)
        with self.process.stdin as spec_in:
            spec_in.write(json.dumps(spec).encode())

    def bye(self) -> None:
        """An orderly exit: the watcher ends without a word (and is reaped, no zombie in a long-lived process)."""
        if self.write is None:
            return
        try:
            os.write(self.write, BYE)
        finally:
            os.close(self.write)
            self.write = None
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def forget(self) -> None:
        """In a forked child: close its copy of the write end, so that the pipe closes with the training process."""
        if self.write is not None:
            os.close(self.write)
            self.write = None


_CURRENT: Optional[Watch] = None
_FORK_HOOK = False


def start(spec: dict[str, Any]) -> Watch:
    """Starts the watcher of this process with the words of `spec` (see `watch`); one at a time."""
    global _CURRENT, _FORK_HOOK
    bye()
    if not _FORK_HOOK:
        os.register_at_fork(after_in_child=_forget_in_child)
        _FORK_HOOK = True
    _CURRENT = Watch(spec)
    return _CURRENT


def bye() -> None:
    """This process ends in order (or has said why it ends): its watcher, if any, keeps quiet and ends."""
    global _CURRENT
    if _CURRENT is not None:
        _CURRENT.bye()
        _CURRENT = None


def _forget_in_child() -> None:
    global _CURRENT
    if _CURRENT is not None:
        _CURRENT.forget()
        _CURRENT = None


@contextlib.contextmanager
def watching(cfg: Any) -> Iterator[None]:
    """The entry script's run, watched where this is its main process: not a DDP rank > 0 (rank_watch names those),
    which Lightning starts with RANK / LOCAL_RANK / NODE_RANK set."""
    if any(os.environ.get(key, "0") != "0" for key in ("RANK", "LOCAL_RANK", "NODE_RANK")):
        yield
        return
    try:
        spec = words(cfg)
    except Exception:  # noqa: BLE001  (a config that does not resolve: train refuses it in its own words)
        spec = None
    if spec is None:
        yield
        return
    start(spec)
    try:
        yield
    finally:
        bye()


def words(cfg: Any) -> dict[str, Any]:
    """The watcher's spec for the run `cfg`: its lines, made here (gptlab's words have one home each), and where its
    checkpoints go."""
    from gptlab.launch.continuing import continue_words
    from gptlab.launch.out_of_memory import killed_for_memory

    run_dir = Path(cfg.paths.output_dir)
    callbacks = cfg.get("callbacks") or {}
    dirs = list(dict.fromkeys(str(node.get("dirpath")) for node in callbacks.values()
                              if node and "Checkpoint" in str(node.get("_target_", "")) and node.get("dirpath")))
    devices = cfg.trainer.get("devices", 1)
    ranks = (devices if isinstance(devices, int) else 1) * int(cfg.trainer.get("num_nodes", 1) or 1)
    who = f"gptlab: the run's main process (pid {os.getpid()})"
    counters = [VMSTAT, *filter(None, [cgroup_events()])]
    return {"counters": counters, "checkpoint_dirs": dirs,
            "oom": f"{who} was killed, {killed_for_memory(cfg.data.get('batch_size'), ranks)}",
            "abrupt": f"{who} ended without a word: it was killed from outside (SIGKILL) or crashed",
            "saved": continue_words(run_dir, True), "unsaved": continue_words(run_dir, False)}
