"""The one exception type that means "the user asked for something invalid".

Entry scripts catch it and print its message without a traceback; anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable


class ConfigError(ValueError):
    """A bad config value, file or argument; the message names the field and what to use instead."""


def is_int(value: Any) -> bool:
    """An integer that is not a bool: to Python True is the integer 1, but a config's `true` is not a count."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def invalid_choice(field: str, value: Any, allowed: Iterable[Any]) -> ConfigError:
    choices = ", ".join(repr(a) for a in allowed)
    return ConfigError(f"{field}={value!r} is not a valid choice; use one of: {choices}.")


class DiskFullError(ConfigError):
    """A file could not be written for lack of space. Not a bug, so it is reported like a config error: one
    paragraph with the numbers, no traceback; the message says that nothing was half-written."""


def format_size(n_bytes: int, up: bool = False) -> str:
    """MB below 1 GiB (where the precision matters to a user freeing space; KB below 1 MB), else GiB. `up` rounds
    up at the precision shown, for an amount to free: freeing what the message says is then enough."""
    unit, scale, digits = ("KB", 2**10, 1) if n_bytes < 2**20 else ("MB", 2**20, 1) if n_bytes < 2**30 \
        else ("GiB", 2**30, 2)
    value = n_bytes / scale
    if up:
        value = math.ceil(value * 10**digits) / 10**digits
    return f"{value:,.{digits}f} {unit}"


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or inf loss; the message names the step. Checkpoints already written stay."""


class LossSpikeError(NonFiniteLossError):
    """callbacks.loss_spike skipped too many optimizer steps in a row; the message names the step and the knobs."""


class PreemptedError(Exception):
    """The job was asked to stop (SIGTERM, SIGUSR1) and saved a checkpoint to resume from; not a failure of the
    run, yet not a finished one: entry scripts exit 128 + the signal number, as if killed by it."""

    def __init__(self, signum: int, step: int, checkpoint: object) -> None:
        import signal

        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        super().__init__(f"{signal.Signals(signum).name} at step {step}; saved {checkpoint}")


class StoppedBySignal(Exception):
    """A stop signal (SIGTERM, SIGUSR1, Ctrl-C) came before training started, while the data was being prepared:
    the work is abandoned at once, what is whole on disk stays (a prepare continues where it stopped), and entry
    scripts exit 128 + the signal number, as if killed by it."""

    def __init__(self, signum: int, what: str) -> None:
        import signal

        self.signum = signum
        super().__init__(f"{signal.Signals(signum).name} while {what}")


def find_config_error(err: BaseException) -> ConfigError | None:
    """The ConfigError behind `err`, also when Hydra's instantiate wrapped it in its own exception; a refusal of
    Hydra's own target policy (a blocklisted `_target_`) as one too."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ConfigError):
            return seen
        refused = hydra_policy_refusal(seen)
        if refused is not None:
            return refused
        seen = seen.__cause__ or seen.__context__
    return None


# The words of Hydra's target policy (hydra/_internal/target_policy.py, Hydra >= 1.3.3): it refuses targets that let
# config data run code, whichever node names them.
HYDRA_POLICY = re.compile(r"blocklisted|trusted Python code|HYDRA_INSTANTIATE_ALLOWLIST_OVERRIDE|[Dd]eclarative "
                          r"configuration|partial subclasses")


def hydra_policy_refusal(err: BaseException) -> ConfigError | None:
    """Hydra's InstantiationException for a target its policy refuses, as one line naming the node and the target;
    None for any other exception (matched by name: this base module imports no Hydra)."""
    if type(err).__name__ != "InstantiationException" or not HYDRA_POLICY.search(str(err)):
        return None
    text = str(err)
    key = re.search(r"^full_key: (\S+)", text, re.MULTILINE)
    node = key.group(1) if key else "a node"
    target = re.search(r"Target '([^']+)'", text)
    named = f"_target_ {target.group(1)!r}" if target else "its _target_"
    said = " ".join(line.strip() for line in text.splitlines() if not line.startswith("full_key:"))
    said = said.split(". ")[0].rstrip(".")
    return ConfigError(
        f"{node} names {named}, which Hydra's instantiate refuses to run ({said}); a config node builds a "
        f"tokenizer, corpus, callback, optimizer or schedule, not arbitrary code. Drop {node} from the command, or "
        "name a class of its kind (conf/ has one for every group)."
    )
