"""What every entry script shares: a user's mistake is a message and exit code 2 (a diverged run: 1), not a
traceback."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

from gptlab.errors import ConfigError, NonFiniteLossError

F = TypeVar("F", bound=Callable[..., Any])


def find_config_error(err: BaseException) -> ConfigError | None:
    """The ConfigError behind `err`, also when Hydra's instantiate wrapped it in its own exception."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ConfigError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def user_errors_exit(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NonFiniteLossError as err:  # a diverged run is not a bug in gptlab: no traceback either
            print(f"gptlab: training stopped: {err}", file=sys.stderr)
            sys.exit(1)
        except Exception as err:
            user_error = find_config_error(err)
            if user_error is None:
                raise
            print(f"gptlab: error: {user_error}", file=sys.stderr)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
