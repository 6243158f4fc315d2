"""A command that runs train.py as a child (scripts/sequential_sweep.py, scripts/campaign.py run/confirm) stops the way
the child would alone: Ctrl-C, SIGTERM, SIGHUP or SIGUSR1 (SLURM's warning, on which train.py saves and requeues)
reaching this process is passed to the child once, and this waits for it to save and stop, then exits with its code.
subprocess.run instead SIGKILLs the child 0.25 s after a Ctrl-C, and on SIGTERM leaves or kills it, before it can
save last.ckpt.

The child gets a process group of its own, so a terminal's Ctrl-C (sent to the foreground group) reaches it once,
through this process, not twice (a second Ctrl-C stops a run at once, without its save)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from typing import Any, Sequence

PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


def run(argv: Sequence[str], **popen: Any) -> int:
    """`argv`'s exit code; exits with it (the child said why) when a passed-on signal stopped it."""
    proc = subprocess.Popen(list(argv), process_group=0, **popen)
    received: list[int] = []

    def pass_on(signum: int, frame: Any) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, pass_on) for s in PASSED_ON} if main else {}
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        name = "Ctrl-C" if received[0] == signal.SIGINT else signal.Signals(received[0]).name
        print(f"gptlab: stopped by {name} with the run it started (its own line above says what it saved); run the "
              "same command again to continue.", file=sys.stderr, flush=True)
        sys.exit(code if code > 0 else 128 + received[0])
    return code
