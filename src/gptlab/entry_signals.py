"""What every entry script runs first, before its heavy imports (standard library only): Ctrl-C, SIGTERM, SIGHUP or
SIGUSR1 (SLURM's `--signal=USR1@N` warning before a time limit) at any moment ends it with one gptlab line and the
exit code a shell and a scheduler read as "stopped by that signal".

While an import is in progress the process ends at once (os._exit): a KeyboardInterrupt raised inside numpy's or
torch's import leaves half-initialised modules behind, and the code that would then report it imports them again
and fails with an unrelated AttributeError (issue 54). An import writes nothing of gptlab's, so nothing is left
half-written. Elsewhere Ctrl-C is Python's KeyboardInterrupt, which the entry's own handler words (how to go on; no
traceback where none is caught), and SIGTERM unwinds as a SystemExit: `finally` blocks run, so a file being
written (gptlab/atomic.py) is removed rather than left half-written. src/train.py then replaces the SIGTERM handler
with the preemption flag (gptlab/signals.py), which saves a checkpoint first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any, NoReturn

# exit 128 + n, as if killed by it: 130, 143, 129, 138 (SIGUSR1's default action kills without a word)
ANSWERED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


class Terminated(SystemExit):
    """SIGTERM, SIGHUP or SIGUSR1 outside an import: unwinds like sys.exit(128 + n), the line already said."""


def _importing(frame: Any) -> bool:
    """Whether the interrupted code runs inside an import (importlib's bootstrap is on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def _say(text: str) -> None:
    os.write(2, f"gptlab: {text}\n".encode(errors="replace"))  # no lock the interrupted code could hold


def stop(signum: int, frame: Any, doing: str, before: str = "before any work") -> NoReturn:
    """Ends the process on `signum` now, with one line: at once inside an import, else by unwinding (Terminated)
    from `frame`, the code the signal interrupted (`doing`: what that was; `before`: what had not begun)."""
    if _importing(frame):
        _say(f"stopped: {_name(signum)} while starting up (importing), {before}: nothing was written; run the same "
             "command again.")
        os._exit(128 + signum)
    _say(f"stopped: {_name(signum)} while {doing}. What was finished is kept (a file being written is removed); "
         "run the same command again to continue.")
    raise Terminated(128 + signum)


def _on_signal(signum: int, frame: Any) -> None:
    if signum == signal.SIGINT and not _importing(frame):
        raise KeyboardInterrupt
    stop(signum, frame, "running")


def _excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """A Ctrl-C that no handler of the script caught: one line instead of a traceback (the interpreter then exits
    as killed by SIGINT, which a shell reports as 130)."""
    if issubclass(kind, KeyboardInterrupt):
        _say("interrupted (Ctrl-C). What was finished is kept; run the same command again to continue.")
        return
    _previous_hook(kind, value, tb)


_previous_hook = sys.excepthook


def answer_signals() -> None:
    """Installs the handlers (main thread only; where a signal is ignored, as under nohup, it stays ignored)."""
    global _installed
    for signum in ANSWERED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _on_signal)
    sys.excepthook = _excepthook
    if not _installed:
        os.register_at_fork(after_in_child=_forget_in_child)
        _installed = True


_installed = False


def _forget_in_child() -> None:
    """A forked worker (a tokenizing Pool's, a DataLoader's) is the entry script's, not the entry script: it dies of
    SIGTERM as any process (Pool.terminate ends it so) and says nothing, so a stop is one line, the parent's."""
    for signum in ANSWERED:
        if signal.getsignal(signum) is _on_signal:
            with contextlib.suppress(ValueError):  # not the main thread: a fork from another thread keeps ours
                signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    if sys.excepthook is _excepthook:
        sys.excepthook = _previous_hook
