"""The watcher process of gptlab.launch.death_watch (run as `python -S -I death_watcher.py <read fd>`, its spec on
stdin): the standard library's os, sys, signal and json only, so that it starts in milliseconds and holds a few MB."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Optional

BYE = b"bye"
VMSTAT = "/proc/vmstat"
IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)  # the training process answers them


def oom_kills(paths: list[str]) -> dict[str, int]:
    """The `oom_kill` count of each readable counter file (/proc/vmstat, a cgroup's memory.events)."""
    counts = {}
    for path in paths:
        try:
            with open(path) as counters:
                lines = counters.read().splitlines()
            for line in lines:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    counts[path] = int(value)
        except (OSError, ValueError):
            continue
    return counts


def cgroup_events() -> Optional[str]:
    """This process's cgroup v2 memory.events, where there is one to read."""
    try:
        with open("/proc/self/cgroup") as groups:
            for line in groups.read().splitlines():
                if line.startswith("0::"):
                    events = os.path.join("/sys/fs/cgroup", line[3:].lstrip("/"), "memory.events")
                    return events if os.access(events, os.R_OK) else None
    except OSError:
        pass
    return None


def saved_checkpoint(dirs: list[str]) -> bool:
    return any(name.endswith(".ckpt") for d in dirs if os.path.isdir(d) for name in os.listdir(d))


def watch(read: int, spec: dict[str, Any]) -> None:
    """The watcher: wait for BYE or the pipe's end; on an end without BYE print the one line. `spec`: counters (the
    files to compare), oom and abrupt (the line's start for each case), checkpoint_dirs, saved and unsaved (how to go
    on with or without a checkpoint in them)."""
    for signum in IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    before = oom_kills(spec["counters"])
    heard = b""
    with os.fdopen(read, "rb", buffering=0) as pipe:
        while BYE not in heard:
            chunk = pipe.read(64)
            if not chunk:
                break
            heard += chunk
    if BYE in heard:
        return
    after = oom_kills(spec["counters"])
    rose = any(after.get(path, 0) > count for path, count in before.items())
    counter = "did not rise" if before else "is unreadable here"
    said = spec["oom"] if rose else f"{spec['abrupt']} (the kernel's OOM-kill counter {counter})"
    how = spec["saved"] if saved_checkpoint(spec["checkpoint_dirs"]) else spec["unsaved"]
    print(f"{said}. {how}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    watch(int(sys.argv[1]), json.loads(sys.stdin.read()))  # the spec on stdin (see death_watch.Watch)
