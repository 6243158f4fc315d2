"""What every entry script shares: a user's mistake is a message and exit code 2 (a diverged run: 1), not a
traceback."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from typing import Any, Callable, NoReturn, TypeVar

from gptlab.errors import NonFiniteLossError, PreemptedError, StoppedBySignal, find_config_error
from gptlab.launch.arguments import ArgumentParser  # noqa: F401  (the scripts' parser, re-exported)
from gptlab.launch.continuing import preempted_message
from gptlab.signals import requeue_slurm_job

F = TypeVar("F", bound=Callable[..., Any])


def refuse(error: object) -> NoReturn:
    """A user's mistake found outside a main that user_errors_exit wraps (a Hydra callback): one line, exit 2."""
    print(f"gptlab: error: {error}", file=sys.stderr, flush=True)
    sys.exit(2)


def global_rank() -> int:
    """This process's global rank (Lightning sets it when its strategy starts; the launcher's env vars before)."""
    # Lightning's own record where it is imported; never imported here: a Ctrl-C that cut an import (numpy's)
    # would make this import fail on the half-initialised module instead of saying the Ctrl-C (issue 54)
    utilities = sys.modules.get("lightning.pytorch.utilities.rank_zero")
    rank = getattr(getattr(utilities, "rank_zero_only", None), "rank", None)
    return int(rank if rank is not None else os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))


def is_rank_zero() -> bool:
    return global_rank() == 0


def _fused_member_interrupted(signum: int) -> bool:
    """A fused sweep's member stopped by the Ctrl-C its launcher passed on: the launcher says it once for all."""
    return signum == signal.SIGINT and threading.current_thread() is not threading.main_thread()


def user_errors_exit(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PreemptedError as err:  # every rank saw it at the same step; rank 0 speaks for them
            if is_rank_zero() and not _fused_member_interrupted(err.signum):
                print(f"gptlab: {preempted_message(err)}", file=sys.stderr)
            sys.exit(128 + err.signum)  # as if the signal had killed it: schedulers and sweepers see "not finished"
        except StoppedBySignal as err:  # before training: nothing to save, nothing to resume but a prepare
            if is_rank_zero() and not _fused_member_interrupted(err.signum):
                print(f"gptlab: stopped: {err}. What was finished is kept; run the same command again to continue.",
                      file=sys.stderr)
                if err.signum == signal.SIGUSR1:
                    requeue_slurm_job()  # the same command again, by SLURM
            sys.exit(128 + err.signum)
        except KeyboardInterrupt as err:  # Ctrl-C; during a fit, gptlab.apps.train.FitInterrupted says how to go on
            if is_rank_zero():
                words = getattr(err, "words", None) or \
                    "What was finished is kept; run the same command again to continue."
                print(f"gptlab: interrupted (Ctrl-C) {words}" if hasattr(err, "words") else
                      f"gptlab: interrupted (Ctrl-C). {words}", file=sys.stderr)
            sys.exit(130)
        except NonFiniteLossError as err:  # a diverged run is not a bug in gptlab: no traceback either
            if is_rank_zero():
                print(f"gptlab: training stopped: {err}", file=sys.stderr)
            sys.exit(1)
        except Exception as err:
            user_error = find_config_error(err)
            if user_error is None:
                from gptlab.launch.rank_watch import collective_failure_message

                lost = collective_failure_message(err)  # another DDP rank is gone: one line, no traceback
                if lost is None:
                    raise
                print(f"gptlab: rank {global_rank()}: {lost}", file=sys.stderr)
                sys.exit(1)
            print(f"gptlab: error: {user_error}", file=sys.stderr)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
